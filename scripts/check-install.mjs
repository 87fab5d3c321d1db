#!/usr/bin/env node
// Installs bot-homeserver the way docs/testing-bots.md tells a bot project to, in a throwaway
// project, and runs the docs' example test there (examples/ping-bot): the package's tarball (`npm
// pack`), with matrix-bot-sdk loading through the crypto stand-in the package ships. CI runs it
// (.ci/run); `npm run check:install` runs it here.
//
//   node scripts/check-install.mjs [--no-build] [--full] [--git] [--keep]
//
// --no-build  pack dist/ as it is (CI packs right after `npm publish --dry-run` has built it);
//             by default `npm pack` builds first, as publishing does.
// --full      run every install script, as a bot project's install does: better-sqlite3 and argon2
//             then compile where their prebuilt binaries cannot be fetched or used (a minute or
//             more). By default the throwaway project installs with --ignore-scripts and borrows
//             those compiled addons from this checkout's node_modules when the versions match
//             (and builds the others): the check is about our package, not about node-gyp.
// --git       also install from git (git+file:// of this checkout's HEAD), which clones and builds
//             the package with its dev dependencies: minutes; not run in CI.
// --keep      keep the throwaway projects and say where they are.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = new Set(process.argv.slice(2));
const example = join(root, 'examples/ping-bot');
const exampleManifest = JSON.parse(readFileSync(join(example, 'package.json'), 'utf8'));
// What the docs install: a registry-like spec for the rest, ours from the tarball.
const versionOf = (name) => exampleManifest.dependencies?.[name] ?? exampleManifest.devDependencies?.[name];
const work = mkdtempSync(join(tmpdir(), 'bhs-check-install-'));
const timings = [];
const failures = [];

function step(label, fn) {
  const start = performance.now();
  const result = fn();
  timings.push([label, (performance.now() - start) / 1000]);
  return result;
}

function fail(message) {
  failures.push(message);
}

/** Runs a command, its output shown only when it fails. */
function run(cmd, cmdArgs, cwd, { timeout = 300_000, env = {} } = {}) {
  const result = spawnSync(cmd, cmdArgs, { cwd, encoding: 'utf8', timeout, env: { ...process.env, ...env } });
  if (result.status !== 0) {
    const why = result.error ? result.error.message : `exit status ${result.status}`;
    throw new Error(`${cmd} ${cmdArgs.join(' ')} (in ${cwd}) failed: ${why}\n${result.stdout}${result.stderr}`);
  }
  return result.stdout;
}

const npmFlags = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];
const scriptsFlag = args.has('--full') ? [] : ['--ignore-scripts'];

try {
  // 1. The tarball, and what it holds.
  const packed = step('npm pack', () => JSON.parse(run('npm', ['pack', '--json', '--pack-destination', work, ...(args.has('--no-build') ? ['--ignore-scripts'] : [])], root, { env: { npm_config_loglevel: 'error' } }))[0]);
  const tarball = join(work, packed.filename);
  checkContents(packed);
  console.log(`check-install: ${packed.filename}: ${(packed.size / 1e6).toFixed(1)} MB packed, ${(packed.unpackedSize / 1e6).toFixed(1)} MB unpacked, ${packed.entryCount} files`);

  // 2. A new bot project, following docs/testing-bots.md step by step.
  const project = join(work, 'my-bot');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), `${JSON.stringify({ name: 'my-bot', version: '1.0.0', private: true, type: 'module', scripts: { test: 'vitest run' } }, null, 2)}\n`);
  cpSync(join(example, 'src'), join(project, 'src'), { recursive: true });
  cpSync(join(example, 'test'), join(project, 'test'), { recursive: true });

  step('npm install bot-homeserver (tarball) + vitest', () =>
    run('npm', ['install', '--save-dev', tarball, `vitest@${versionOf('vitest')}`, ...npmFlags, ...scriptsFlag], project));
  step('copy the crypto stand-in, npm pkg set overrides', () => {
    mkdirSync(join(project, 'stubs'));
    cpSync(join(project, 'node_modules/bot-homeserver/stubs/matrix-sdk-crypto-nodejs'), join(project, 'stubs/matrix-sdk-crypto-nodejs'), { recursive: true });
    run('npm', ['pkg', 'set', 'devDependencies.@matrix-org/matrix-sdk-crypto-nodejs=file:./stubs/matrix-sdk-crypto-nodejs', 'overrides.@matrix-org/matrix-sdk-crypto-nodejs=$@matrix-org/matrix-sdk-crypto-nodejs'], project);
  });
  step('npm install matrix-bot-sdk', () =>
    run('npm', ['install', `matrix-bot-sdk@${versionOf('matrix-bot-sdk')}`, ...npmFlags, ...scriptsFlag], project));
  if (!args.has('--full')) step('native addons (borrowed or built)', () => nativeAddons(project));

  checkProject(project);

  // 3. The docs' example test, and the command, from the installed package.
  const test = step('vitest run (the docs\' example)', () => spawnSync('npx', ['vitest', 'run'], { cwd: project, encoding: 'utf8', timeout: 120_000 }));
  if (test.status !== 0 || !/Tests\s+1 passed/.test(test.stdout.replace(/\x1b\[[0-9;]*m/g, ''))) {
    fail(`the example test did not pass in the bot project:\n${test.stdout}${test.stderr}`);
  }
  // In the project's folder: the database and signing key go to its ./data.
  for (const [label, cmd, cmdArgs] of [['bot-homeserver create-bot (first run)', join(project, 'node_modules/.bin/bot-homeserver'), []], ['npx bot-homeserver create-bot', 'npx', ['bot-homeserver']]]) {
    const out = step(label, () => spawnSync(cmd, [...cmdArgs, 'create-bot', 'hello', '--json'], { cwd: project, encoding: 'utf8', timeout: 60_000 }));
    if (out.status !== 0 || !out.stdout.includes('"user_id":"@hello:localhost"')) fail(`${label} failed:\n${out.stdout}${out.stderr}`);
  }

  // The Python example (docs/testing-bots.md) in the same project: pytest finds the installed
  // command in node_modules/.bin. Every test must pass and none be skipped.
  step('pytest (the docs\' Python example)', () => {
    for (const file of ['test_bot.py', 'fixtures.yaml', 'pytest.ini']) copyFileSync(join(root, 'examples/python', file), join(project, file));
    const out = spawnSync('/usr/bin/python3', ['-m', 'pytest', '-p', 'no:cacheprovider', '-rA', '--junitxml=report.xml'], { cwd: project, encoding: 'utf8', timeout: 120_000 });
    const report = out.status === 0 ? readFileSync(join(project, 'report.xml'), 'utf8') : '';
    const counts = Object.fromEntries(['tests', 'failures', 'errors', 'skipped'].map((name) => [name, Number(new RegExp(`${name}="(\\d+)"`).exec(report)?.[1] ?? -1)]));
    if (out.status !== 0 || counts.tests < 1 || counts.failures !== 0 || counts.errors !== 0 || counts.skipped !== 0) {
      fail(`the Python example did not pass in the bot project (${JSON.stringify(counts)}):\n${out.stdout}${out.stderr}`);
    }
  });

  // 4. From git (optional): npm clones, installs the dev dependencies and runs `prepare`.
  if (args.has('--git')) checkGit();
} catch (err) {
  fail(err instanceof Error ? err.message : String(err));
}

for (const [label, seconds] of timings) console.log(`check-install: ${seconds.toFixed(1).padStart(6)} s  ${label}`);
if (args.has('--keep')) console.log(`check-install: kept ${work}`);
else rmSync(work, { recursive: true, force: true });
if (failures.length) {
  for (const message of failures) console.error(`check-install: ${message}`);
  console.error('check-install: FAILED');
  process.exitCode = 1;
} else {
  console.log('check-install: the tarball installs, the example test passes');
}

/** The package holds the build and the stand-in, and nothing that needs compiling or tests. */
function checkContents(packed) {
  const files = new Set(packed.files.map((file) => file.path));
  const required = [
    'package.json', 'bin/bot-homeserver.js', 'config.example.yaml',
    'dist/bundle/main.mjs', 'dist/bundle/feed-parse-worker.mjs', 'dist/bundle/chunks.json',
    'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/testing/index.js', 'dist/src/testing/index.d.ts',
    'stubs/matrix-sdk-crypto-nodejs/package.json', 'stubs/matrix-sdk-crypto-nodejs/index.js', 'stubs/matrix-sdk-crypto-nodejs/index.d.ts',
  ];
  for (const path of required) if (!files.has(path)) fail(`the tarball lacks ${path}`);
  for (const path of files) {
    if (/^(src|test|migrations|examples|bench|scripts|node_modules)\//.test(path) || /^dist\.(tmp|old)-/.test(path)) fail(`the tarball should not hold ${path}`);
    if (path.endsWith('.ts') && !path.endsWith('.d.ts')) fail(`the tarball holds TypeScript source ${path}`);
  }
  // Chunks of earlier builds stay in a checkout's dist/ for servers started from them; a package has none.
  const chunksJson = packed.files.find((file) => file.path === 'dist/bundle/chunks.json');
  if (chunksJson) {
    const own = new Set(JSON.parse(readFileSync(join(root, 'dist/bundle/chunks.json'), 'utf8')).chunks);
    const stale = [...files].filter((path) => path.startsWith('dist/bundle/chunks/') && !own.has(path.slice('dist/bundle/chunks/'.length)));
    if (stale.length) fail(`the tarball holds chunks of earlier builds (${stale.slice(0, 3).join(', ')}...): pack without --no-build`);
  }
  if (packed.size > 6e6) fail(`the tarball is ${(packed.size / 1e6).toFixed(1)} MB; it was 2.6 MB`);
}

/** What a tarball install must not have pulled in: our dev dependencies, a TypeScript build. */
function checkProject(project) {
  for (const name of ['typescript', 'esbuild', 'tsx']) {
    if (existsSync(join(project, 'node_modules', name))) fail(`the bot project got ${name}: a dev dependency of bot-homeserver leaked into its install`);
  }
  const link = join(project, 'node_modules/@matrix-org/matrix-sdk-crypto-nodejs/package.json');
  if (!existsSync(link) || JSON.parse(readFileSync(link, 'utf8')).version !== '0.0.0-stub') fail('matrix-bot-sdk\'s crypto module is not the stand-in');
  const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'));
  const names = (m) => [...Object.keys(m.dependencies ?? {}), ...Object.keys(m.devDependencies ?? {})].sort();
  if (names(manifest).join() !== names(exampleManifest).join()) {
    fail(`following the docs gave dependencies ${names(manifest).join(', ')}; examples/ping-bot/package.json has ${names(exampleManifest).join(', ')}`);
  }
  if (JSON.stringify(manifest.overrides) !== JSON.stringify(exampleManifest.overrides)) fail('the overrides differ from examples/ping-bot/package.json');
}

/**
 * Packages with install scripts (or a binding.gyp npm would build), as npm decides. Each gets the
 * compiled build/ of the same version from this checkout's node_modules, hard-linked, or else is
 * built by `npm rebuild`, as its install would.
 */
function nativeAddons(project) {
  for (const dir of packageDirs(join(project, 'node_modules'))) {
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    const scripts = manifest.scripts ?? {};
    const gyp = manifest.gypfile !== false && existsSync(join(dir, 'binding.gyp'));
    if (!scripts.preinstall && !scripts.install && !scripts.postinstall && !gyp) continue;
    const relative = dir.slice(join(project, 'node_modules').length + 1);
    const ours = join(root, 'node_modules', relative);
    const sameVersion = existsSync(join(ours, 'package.json')) && JSON.parse(readFileSync(join(ours, 'package.json'), 'utf8')).version === manifest.version;
    if (sameVersion && existsSync(join(ours, 'build'))) {
      execFileSync('cp', ['-al', join(ours, 'build'), join(dir, 'build')]);
    } else {
      console.log(`check-install: building ${relative}@${manifest.version} (no compiled copy of that version here)`);
      run('npm', ['rebuild', relative, '--foreground-scripts=false'], project, { timeout: 600_000 });
    }
  }
}

function packageDirs(nodeModules) {
  const dirs = [];
  if (!existsSync(nodeModules)) return dirs;
  for (const name of readdirSync(nodeModules)) {
    if (name.startsWith('.')) continue;
    const path = join(nodeModules, name);
    if (name.startsWith('@')) {
      for (const scoped of readdirSync(path)) dirs.push(join(path, scoped));
    } else if (statSync(path).isDirectory()) {
      dirs.push(path);
    }
  }
  return dirs.flatMap((dir) => (existsSync(join(dir, 'package.json')) ? [dir, ...packageDirs(join(dir, 'node_modules'))] : []));
}

function checkGit() {
  const project = join(work, 'from-git');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), `${JSON.stringify({ name: 'from-git', version: '1.0.0', private: true, type: 'module' }, null, 2)}\n`);
  const head = run('git', ['rev-parse', 'HEAD'], root).trim();
  step('npm install git+file:// (clone, dev dependencies, prepare)', () =>
    run('npm', ['install', '--save-dev', `git+${pathToFileURL(root).href}#${head}`, ...npmFlags], project, { timeout: 900_000 }));
  for (const path of ['dist/bundle/main.mjs', 'dist/src/testing/index.js', 'stubs/matrix-sdk-crypto-nodejs/index.js']) {
    if (!existsSync(join(project, 'node_modules/bot-homeserver', path))) fail(`installed from git, the package lacks ${path}`);
  }
  const out = spawnSync(process.execPath, ['--input-type=module', '-e', "const { startTestHomeserver } = await import('bot-homeserver/testing'); const hs = await startTestHomeserver(); await hs.createUser('a'); await hs.close(); console.log('ok')"], { cwd: project, encoding: 'utf8', timeout: 60_000 });
  if (out.stdout.trim() !== 'ok') fail(`installed from git, bot-homeserver/testing does not start:\n${out.stdout}${out.stderr}`);
}
