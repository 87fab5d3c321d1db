/**
 * Requests to application services (the Application Service API): transactions, user and alias
 * queries, and pings, each with the registration's `hs_token` and a time limit. The URL is the
 * operator's own configuration, so internal addresses are allowed (appservices usually run next
 * to the server).
 */
import type { AppService } from './registry.js';

/** Why a request to an appservice failed, in the ping endpoint's terms. */
export class AppServiceRequestError extends Error {
  override name = 'AppServiceRequestError';
  constructor(
    readonly kind: 'timeout' | 'connection' | 'status',
    message: string,
    readonly status?: number,
    readonly body?: string,
  ) {
    super(message);
  }
}

export interface AppServiceClientOptions {
  /** Milliseconds a request may take. */
  timeoutMs: number;
}

export class AppServiceClient {
  constructor(private readonly options: AppServiceClientOptions) {}

  /** `PUT /_matrix/app/v1/transactions/{txnId}`; resolves once the appservice answered 2xx. */
  async pushTransaction(service: AppService, txnId: string, body: Record<string, unknown>): Promise<void> {
    await this.request(service, 'PUT', `/_matrix/app/v1/transactions/${encodeURIComponent(txnId)}`, body);
  }

  /** `GET /_matrix/app/v1/users/{userId}`: true when the appservice says it created the user. */
  async queryUser(service: AppService, userId: string): Promise<boolean> {
    return this.query(service, `/_matrix/app/v1/users/${encodeURIComponent(userId)}`);
  }

  /** `GET /_matrix/app/v1/rooms/{alias}`: true when the appservice says it created the alias. */
  async queryAlias(service: AppService, alias: string): Promise<boolean> {
    return this.query(service, `/_matrix/app/v1/rooms/${encodeURIComponent(alias)}`);
  }

  /** `POST /_matrix/app/v1/ping`: how long the appservice took to answer. */
  async ping(service: AppService, transactionId: string | undefined): Promise<number> {
    const started = performance.now();
    await this.request(service, 'POST', '/_matrix/app/v1/ping', transactionId === undefined ? {} : { transaction_id: transactionId });
    return Math.round(performance.now() - started);
  }

  private async query(service: AppService, path: string): Promise<boolean> {
    try {
      await this.request(service, 'GET', path);
      return true;
    } catch {
      // Not found, down or broken: the id stays unknown.
      return false;
    }
  }

  private async request(service: AppService, method: string, path: string, body?: unknown): Promise<string> {
    if (service.url === null) throw new AppServiceRequestError('connection', `appservice ${service.id} has no url`);
    let response: Response;
    try {
      response = await fetch(`${service.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${service.hsToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.options.timeoutMs),
        redirect: 'error',
      });
    } catch (err) {
      const timedOut = (err as Error).name === 'TimeoutError' || (err as Error).name === 'AbortError';
      throw new AppServiceRequestError(timedOut ? 'timeout' : 'connection', `appservice ${service.id}: ${timedOut ? 'no answer in time' : (err as Error).message}`);
    }
    // Bounded: an appservice's answer is read only to report it.
    const text = (await response.text().catch(() => '')).slice(0, 4096);
    if (!response.ok) throw new AppServiceRequestError('status', `appservice ${service.id} answered ${response.status}`, response.status, text);
    return text;
  }
}
