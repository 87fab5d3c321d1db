import { describe, expect, it, vi } from 'vitest';
import type { FastifyBaseLogger } from 'fastify';
import { requestLoggerFactory } from '../../src/http/request-logger.js';
import { capturingLogger } from '../support/logs.js';

function requestLogger(parent: FastifyBaseLogger, options = {}): FastifyBaseLogger {
  return requestLoggerFactory.call(undefined as never, parent, { reqId: 'req-7' }, options, undefined as never);
}

describe('the per-request logger', () => {
  it('makes no pino child until a line at an enabled level is written, then writes with the request id', () => {
    const { logger, lines } = capturingLogger('warn');
    const child = vi.spyOn(logger, 'child');
    const log = requestLogger(logger);
    log.info('not written');
    log.debug({ a: 1 }, 'not written either');
    expect(child).not.toHaveBeenCalled();
    expect(log.level).toBe('warn');
    expect(lines).toEqual([]);

    log.warn({ detail: 'x' }, 'written');
    log.error('also written');
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toMatchObject([
      { level: 40, reqId: 'req-7', detail: 'x', msg: 'written' },
      { level: 50, reqId: 'req-7', msg: 'also written' },
    ]);
  });

  it('honours a level of its own and gives children with the request id', () => {
    const { logger, lines } = capturingLogger('warn');
    const log = requestLogger(logger, { level: 'debug' });
    expect((log as FastifyBaseLogger & { isLevelEnabled(level: string): boolean }).isLevelEnabled('debug')).toBe(true);
    log.debug('route-level debug');
    log.child({ part: 'inner' }).warn('from a child');
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toMatchObject([
      { reqId: 'req-7', msg: 'route-level debug' },
      { reqId: 'req-7', part: 'inner', msg: 'from a child' },
    ]);
  });
});
