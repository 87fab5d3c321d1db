/**
 * The logger each request gets (Fastify's `childLoggerFactory`). pino's child logger for a request
 * (its `reqId` binding) costs about a kilobyte and a dozen bound functions, and a parked `/sync`
 * holds it for as long as it waits; yet most requests never write a line of their own (the
 * request line goes through the app's logger, see logging.ts). So the child is made on the first
 * line a request writes at an enabled level, and never for the others.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { FastifyChildLoggerFactory } from 'fastify/types/logger.js';

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
type LogArguments = [unknown, ...unknown[]];
type Bindings = Record<string, unknown>;
type ChildOptions = { level?: string };

class RequestLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildOptions,
  ) {}

  get level(): string {
    return this.made?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.logger().level = level;
  }

  isLevelEnabled(level: string): boolean {
    if (this.made || this.options.level !== undefined) return isEnabled(this.logger(), level);
    return isEnabled(this.parent, level);
  }

  fatal(...args: LogArguments): void {
    this.write('fatal', args);
  }
  error(...args: LogArguments): void {
    this.write('error', args);
  }
  warn(...args: LogArguments): void {
    this.write('warn', args);
  }
  info(...args: LogArguments): void {
    this.write('info', args);
  }
  debug(...args: LogArguments): void {
    this.write('debug', args);
  }
  trace(...args: LogArguments): void {
    this.write('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildOptions): FastifyBaseLogger {
    return this.logger().child(bindings, options);
  }

  private write(level: Level, args: LogArguments): void {
    if (!this.isLevelEnabled(level)) return;
    const logger = this.logger();
    (logger[level] as (...line: LogArguments) => void).apply(logger, args);
  }

  private logger(): FastifyBaseLogger {
    this.made ??= this.parent.child(this.bindings, this.options);
    return this.made;
  }
}

/** pino's own check where the logger has one (a logger given by the embedder may not). */
export function isEnabled(logger: FastifyBaseLogger, level: string): boolean {
  const check = (logger as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled;
  return typeof check === 'function' ? check.call(logger, level) : true;
}

export const requestLoggerFactory: FastifyChildLoggerFactory = (parent, bindings, options) =>
  new RequestLogger(parent, bindings, options as ChildOptions) as unknown as FastifyBaseLogger;
