import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Each file gets its own in-memory homeserver; files run in parallel workers.
    pool: 'forks',
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
