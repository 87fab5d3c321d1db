/**
 * The one error type. Anything a client did wrong is a `MatrixError`; the HTTP layer turns it into
 * `{"errcode", "error", ...extra}` with the status Synapse uses for that errcode.
 */
export const ERRCODE_STATUS = {
  M_FORBIDDEN: 403,
  M_UNKNOWN_TOKEN: 401,
  M_MISSING_TOKEN: 401,
  M_USER_LOCKED: 401,
  M_BAD_JSON: 400,
  M_NOT_JSON: 400,
  M_NOT_FOUND: 404,
  M_LIMIT_EXCEEDED: 429,
  M_UNRECOGNIZED: 404,
  M_UNKNOWN: 400,
  M_UNAUTHORIZED: 401,
  M_USER_DEACTIVATED: 403,
  M_USER_IN_USE: 400,
  M_INVALID_USERNAME: 400,
  M_EXCLUSIVE: 400,
  M_ROOM_IN_USE: 400,
  M_INVALID_ROOM_STATE: 400,
  M_UNSUPPORTED_ROOM_VERSION: 400,
  M_INCOMPATIBLE_ROOM_VERSION: 400,
  M_BAD_STATE: 400,
  M_GUEST_ACCESS_FORBIDDEN: 403,
  M_MISSING_PARAM: 400,
  M_INVALID_PARAM: 400,
  M_TOO_LARGE: 413,
  M_RESOURCE_LIMIT_EXCEEDED: 403,
  M_WEAK_PASSWORD: 400,
  M_BAD_ALIAS: 400,
  M_UNABLE_TO_AUTHORISE_JOIN: 400,
  M_UNABLE_TO_GRANT_JOIN: 400,
  // POST /appservice/{id}/ping, as the spec words its failures.
  M_URL_NOT_SET: 400,
  M_CONNECTION_TIMEOUT: 504,
  M_CONNECTION_FAILED: 502,
  M_BAD_STATUS: 502,
  M_WRONG_ROOM_KEYS_VERSION: 403,
  M_INVALID_SIGNATURE: 400,
} as const satisfies Record<string, number>;

export type Errcode = keyof typeof ERRCODE_STATUS;

export interface MatrixErrorOptions {
  /** Overrides the errcode's usual status (405 for a wrong method, 500 for an internal error). */
  status?: number;
  /**
   * Extra top-level keys of the error body, e.g. `soft_logout` or `retry_after_ms`. An `errcode`
   * here replaces the errcode in the body: another server's errcode we pass on without knowing it.
   */
  extra?: Record<string, unknown>;
  /** Extra response headers, e.g. `Retry-After`. */
  headers?: Record<string, string>;
}

export class MatrixError extends Error {
  override name = 'MatrixError';
  readonly status: number;
  readonly extra: Record<string, unknown>;
  readonly headers: Record<string, string>;

  constructor(
    readonly errcode: Errcode,
    message: string,
    options: MatrixErrorOptions = {},
  ) {
    super(message);
    this.status = options.status ?? ERRCODE_STATUS[errcode];
    this.extra = options.extra ?? {};
    this.headers = options.headers ?? {};
  }

  toJSON(): Record<string, unknown> {
    return { errcode: this.errcode, error: this.message, ...this.extra };
  }
}

/** 429 with both `retry_after_ms` (Matrix) and `Retry-After` (HTTP, whole seconds rounded up). */
export function rateLimitedError(retryAfterMs: number): MatrixError {
  // A limit that never drains (per_second 0) still gets a finite, honest hint: an hour.
  const ms = Number.isFinite(retryAfterMs) ? Math.max(0, Math.ceil(retryAfterMs)) : 3_600_000;
  return new MatrixError('M_LIMIT_EXCEEDED', 'Too Many Requests', {
    extra: { retry_after_ms: ms },
    headers: { 'Retry-After': String(Math.max(1, Math.ceil(ms / 1000))) },
  });
}
