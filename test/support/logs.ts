/** A logger for tests that read what was logged: every line it writes, as text. */
import { Writable } from 'node:stream';
import { pino, type Logger, type Level } from 'pino';

export function capturingLogger(level: Level = 'trace'): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const logger = pino({ level }, new Writable({ write: (chunk, _enc, done) => { lines.push(String(chunk)); done(); } }));
  return { logger, lines };
}
