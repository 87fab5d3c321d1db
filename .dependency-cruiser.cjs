/**
 * The import rules of docs/architecture.md, checked by `npm test` (`depcruise src migrations`).
 * Domains sit above storage and below the HTTP layer; the room auth rules do no I/O; only storage
 * and migrations speak SQL; nothing imports in a circle.
 */
const DOMAINS = 'users|rooms|sync|media|account-data|ratelimit|bridge|push|federation|appservice|ops|portal';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Modules that import each other, however indirectly, cannot be understood (or changed) one at a time.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'domains-below-http',
      severity: 'error',
      comment: 'Domains (and core, config, storage) never import the HTTP layer: they throw MatrixError (src/core/errors.ts) and the HTTP layer translates it.',
      from: { path: `^src/(${DOMAINS}|core|config|storage)/` },
      to: { path: '^src/http/' },
    },
    {
      name: 'storage-below-domains',
      severity: 'error',
      comment: 'Storage imports no domain and no route: it knows tables, not rules.',
      from: { path: '^src/storage/' },
      to: { path: `^src/(${DOMAINS}|http)/` },
    },
    {
      name: 'http-through-services',
      severity: 'error',
      comment: 'Routes reach storage only through the services (src/services.ts wires them).',
      from: { path: '^src/http/' },
      to: { path: '^src/storage/' },
    },
    {
      name: 'bridge-through-room-service',
      severity: 'error',
      comment: 'The bridge acts on rooms through the room service, like any client; of storage it uses only its own store.',
      from: { path: '^src/bridge/' },
      to: { path: '^src/storage/(?!bridge-store\\.ts$)' },
    },
    {
      name: 'pure-auth-rules',
      severity: 'error',
      comment: 'The room auth rules (and state resolution) are pure: nothing they reach may do I/O.',
      from: { path: '^src/rooms/(auth-rules|state-resolution)[^/]*\\.ts$' },
      to: {
        reachable: true,
        path: '^(src/(storage|http|media|bridge|federation)/|node_modules/(kysely|better-sqlite3|pg|fastify|undici)/)|^node:?(fs|net|http|https|http2|dns|dgram|tls|child_process|worker_threads)$|^(fs|net|http|https|http2|dns|dgram|tls|child_process|worker_threads)$',
      },
    },
    {
      name: 'sql-only-in-storage',
      severity: 'error',
      comment: 'Only storage (and migrations) write SQL, so a second dialect stays one folder\'s work.',
      from: { path: '^src/', pathNot: '^src/storage/' },
      to: { path: '^node_modules/(kysely|better-sqlite3|pg)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
      extensions: ['.ts', '.js', '.mjs', '.cjs', '.json'],
    },
    reporterOptions: {
      text: { highlightFocused: true },
    },
  },
};
