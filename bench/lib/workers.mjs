/**
 * Load generators run in child processes (bench/worker.mjs), so the server's process only ever
 * sees network traffic. The parent sends one task per message and gets one answer back.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('../worker.mjs', import.meta.url));

/** Every live worker, so the run can kill them on any exit path. */
export const liveWorkers = new Set();

export class Worker {
  constructor(name) {
    this.name = name;
    this.child = fork(WORKER, [name], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.pid = this.child.pid;
    this.nextId = 1;
    this.pending = new Map();
    liveWorkers.add(this);
    this.child.on('message', (msg) => {
      const waiter = this.pending.get(msg.id);
      if (!waiter) return;
      this.pending.delete(msg.id);
      if (msg.error) waiter.reject(new Error(`worker ${this.name}: ${msg.error}`));
      else waiter.resolve(msg.result);
    });
    this.child.once('exit', (code, signal) => {
      liveWorkers.delete(this);
      for (const waiter of this.pending.values()) waiter.reject(new Error(`worker ${this.name} exited (code ${code}, signal ${signal})`));
      this.pending.clear();
    });
  }

  /** Forks a worker and waits until it answers, so node's start-up stays out of measurements. */
  static async start(name) {
    const worker = new Worker(name);
    await worker.run('ping');
    return worker;
  }

  /** Runs a task in the worker; resolves with its result. */
  run(task, args) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, task, args });
    });
  }

  kill() {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    liveWorkers.delete(this);
  }
}

/** Other child processes of the bench (the limits scenario's references, the seeder). */
export const liveChildren = new Set();

export function killAllWorkers() {
  for (const w of [...liveWorkers]) w.kill();
  for (const child of [...liveChildren]) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    liveChildren.delete(child);
  }
}
