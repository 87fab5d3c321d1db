/**
 * Starts bot-homeserver as its own process (the compiled CLI, exactly as an operator would) on a
 * fresh database, and reads its CPU time, memory and open sockets from /proc.
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/** How long a server may take to answer; BENCH_READY_TIMEOUT_MS raises it on a machine under load. */
const READY_TIMEOUT_MS = Number(process.env.BENCH_READY_TIMEOUT_MS) || 10_000;

export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * `dir` is an existing directory holding a seeded `hs.db` (the growth scenario); without it a
 * fresh one is made under `dbDir`. Either way it is deleted when the server stops.
 * `logLevel: 'info'` makes the server log `ready` with its port, and `pollMs` is how often
 * readiness is checked: the start-up scenario uses both to time the start to a few ms.
 * @param {{ repoDir: string, synchronous: 'full'|'normal', sharedSecret: string, dbDir?: string, dir?: string,
 *   nodeArgs?: string[], logLevel?: string, pollMs?: number, env?: Record<string, string> }} options
 * @returns {Promise<Server>}
 */
export async function startServer({ repoDir, synchronous, sharedSecret, dbDir, dir: givenDir, nodeArgs = [], logLevel = 'warn', pollMs = 50, env: extraEnv = {}, tls = false, postgres, postgresSchema }) {
  const dir = givenDir ?? mkdtempSync(join(dbDir ?? tmpdir(), 'bhs-bench-'));
  // On PostgreSQL (`--postgres URL`): a schema of this run's own, dropped when the server stops
  // (or one given, which a second process of the same server shares: the first drops it).
  const schema = postgres ? (postgresSchema ?? `bench_${process.pid}_${Date.now().toString(36)}`) : undefined;
  const env = {
    ...withoutHomeserverVars(process.env),
    BOT_HOMESERVER_SERVER_NAME: 'bench.local',
    BOT_HOMESERVER_LISTEN__HOST: '127.0.0.1',
    BOT_HOMESERVER_LISTEN__PORT: '0',
    BOT_HOMESERVER_DATABASE__PATH: join(dir, 'hs.db'),
    BOT_HOMESERVER_DATABASE__SYNCHRONOUS: synchronous,
    BOT_HOMESERVER_RATELIMITING_ENABLED: 'false',
    BOT_HOMESERVER_LOGGING__LEVEL: logLevel,
    BOT_HOMESERVER_REGISTRATION_SHARED_SECRET: sharedSecret,
    // Setup registers up to 10,000 users; at the default argon2 cost (19 MiB, 2 passes) that alone
    // would take minutes. Hashing is only done during setup, never inside a measured window.
    BOT_HOMESERVER_PASSWORD_HASHING__MEMORY_COST_KIB: '8',
    BOT_HOMESERVER_PASSWORD_HASHING__TIME_COST: '1',
    // Parked syncs use timeouts up to 60 s; keep the server from cutting them shorter.
    BOT_HOMESERVER_MAX_SYNC_TIMEOUT: '3m',
    // Up to 10,000 parked syncs, each on its own connection, all from this machine's loopback.
    BOT_HOMESERVER_LISTEN__MAX_CONNECTIONS_PER_ADDRESS: '0',
    ...(postgres ? { BOT_HOMESERVER_DATABASE__URL: postgres, BOT_HOMESERVER_DATABASE__SCHEMA: schema } : {}),
    ...extraEnv,
  };
  const spawnedAt = performance.now();
  const child = spawn(process.execPath, [...nodeArgs, 'bin/bot-homeserver.js', 'start'], {
    cwd: repoDir,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const server = new Server(child, dir);
  server.tls = tls;
  if (postgres && !postgresSchema) server.postgres = { url: postgres, schema };
  if (postgres) server.postgresSchema = schema;
  try {
    server.port = await server.waitForReady(pollMs);
    // Spawn to the first 200 from /versions (within pollMs).
    server.startMs = performance.now() - spawnedAt;
  } catch (err) {
    await server.stop();
    throw err;
  }
  server.baseUrl = `${tls ? 'https' : 'http'}://127.0.0.1:${server.port}`;
  return server;
}

/** A stray BOT_HOMESERVER_* in the caller's shell would change the server under test (or stop it: unknown keys are errors). */
function withoutHomeserverVars(env) {
  const clean = {};
  for (const [k, v] of Object.entries(env)) if (!k.startsWith('BOT_HOMESERVER_')) clean[k] = v;
  return clean;
}

/** Every server process started and not yet exited, so any exit path can kill them. */
export const liveServers = new Set();

export class Server {
  constructor(child, dir) {
    this.child = child;
    this.pid = child.pid;
    this.dir = dir;
    this.exited = false;
    /** Log lines at level error (50) or above, e.g. 500s with their stack. */
    this.errorLines = [];
    this.errorCount = 0;
    this.warnCount = 0;
    this.recentOutput = [];
    liveServers.add(this);
    this.exitPromise = new Promise((resolve) => child.once('exit', (code, signal) => {
      this.exited = true;
      liveServers.delete(this);
      this.exitInfo = { code, signal };
      resolve();
    }));
    const onLine = (line) => {
      this.recentOutput.push(line);
      if (this.recentOutput.length > 40) this.recentOutput.shift();
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (entry.msg === 'ready' && typeof entry.port === 'number') this.loggedPort = entry.port;
      if (entry.level >= 50) {
        this.errorCount++;
        if (this.errorLines.length < 20) this.errorLines.push(line.slice(0, 2000));
      } else if (entry.level >= 40) this.warnCount++;
    };
    createInterface({ input: child.stdout }).on('line', onLine);
    createInterface({ input: child.stderr }).on('line', onLine);
  }

  /**
   * Resolves with the port once the server answers HTTP. The `ready` log line carries the port but
   * is logged at `info`, below the `warn` the bench runs at (so per-request logs cost nothing);
   * so the port is read from /proc: the TCP socket in LISTEN state among the process's fds.
   */
  async waitForReady(pollMs = 50) {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (this.exited) {
        throw new Error(`the server exited (${JSON.stringify(this.exitInfo)}) before it was ready. Output:\n${this.recentOutput.join('\n')}`);
      }
      const port = this.loggedPort ?? listeningPort(this.pid);
      if (port && (await answersHttp(port, this.tls))) return port;
      await new Promise((r) => setTimeout(r, pollMs));
    }
    throw new Error(`the server did not come up within ${READY_TIMEOUT_MS / 1000} s. Last output:\n${this.recentOutput.join('\n')}`);
  }

  /** User + system CPU time of the server process so far, in milliseconds. */
  cpuMs() {
    return processCpuMs(this.pid);
  }

  /** { rssMb, hwmMb } from /proc/<pid>/status. */
  memory() {
    return processMemory(this.pid);
  }

  /** How many file descriptors the server holds (sockets, database files, ...). */
  openFds() {
    try {
      return readdirSync(`/proc/${this.pid}/fd`).length;
    } catch {
      return -1;
    }
  }

  assertAlive() {
    if (this.exited) throw new Error(`the server exited during the run (${JSON.stringify(this.exitInfo)}). Last output:\n${this.recentOutput.join('\n')}`);
  }

  /** SIGTERM, then SIGKILL after a grace period; removes the database directory. */
  async stop(graceMs = 3000) {
    if (!this.exited) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => {
        if (!this.exited) this.child.kill('SIGKILL');
      }, graceMs);
      await this.exitPromise;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
    if (this.postgres) {
      const { default: pg } = await import('pg');
      const client = new pg.Client({ connectionString: this.postgres.url });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${this.postgres.schema}" CASCADE`);
      await client.end();
    }
  }

  /** Last-resort synchronous kill, for process 'exit' handlers. */
  killNow() {
    if (!this.exited) {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    try {
      rmSync(this.dir, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
}

/** The port of the first IPv4/IPv6 TCP socket of `pid` in LISTEN state, or null. */
export function listeningPort(pid) {
  let inodes;
  try {
    inodes = new Set();
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1]);
      } catch {
        // the fd closed meanwhile
      }
    }
  } catch {
    return null;
  }
  for (const table of ['tcp', 'tcp6']) {
    let text;
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // f[1] local address "HEXIP:HEXPORT", f[3] state (0A = LISTEN), f[9] inode
      if (f[3] === '0A' && inodes.has(f[9])) return parseInt(f[1].split(':')[1], 16);
    }
  }
  return null;
}

function answersHttp(port, tls = false) {
  return new Promise((resolve) => {
    const get = tls ? https.get : http.get;
    const req = get({ host: '127.0.0.1', port, path: '/_matrix/client/versions', timeout: 1000, rejectUnauthorized: false }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
  });
}

export function processCpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may contain spaces; the fields after it start past the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return ((utime + stime) * 1000) / CLK_TCK;
}

export function processMemory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: round(kb('VmRSS') / 1024, 1), hwmMb: round(kb('VmHWM') / 1024, 1) };
}

/** The soft limit on open files of this process (children inherit it). */
export function openFilesLimit() {
  const limits = readFileSync('/proc/self/limits', 'utf8');
  const m = /^Max open files\s+(\S+)/m.exec(limits);
  return m && m[1] !== 'unlimited' ? Number(m[1]) : Infinity;
}

/** The filesystem type holding `path` (tmpfs makes synchronous=full meaningless). */
export function filesystemOf(path) {
  try {
    let best = { mount: '', type: 'unknown' };
    for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
      const [, mount, type] = line.split(' ');
      if (!mount) continue;
      if ((path === mount || path.startsWith(mount.endsWith('/') ? mount : `${mount}/`)) && mount.length >= best.mount.length) best = { mount, type };
    }
    return best.type;
  } catch {
    return 'unknown';
  }
}

export function round(x, digits = 2) {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
