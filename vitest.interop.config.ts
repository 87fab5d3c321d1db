import { defineConfig } from 'vitest/config';

// Interop runs against peers you start yourself (see docs/federation.md, "Checking against Synapse").
export default defineConfig({
  test: {
    include: ['test/interop/**/*.interop.ts'],
    pool: 'forks',
    testTimeout: 90_000,
    hookTimeout: 30_000,
  },
});
