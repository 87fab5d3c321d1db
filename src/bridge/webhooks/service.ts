/**
 * Incoming webhooks. A webhook's id is its credential: 256 random bits, handed out once (by direct
 * message) and stored as a SHA-256 hash, so the database alone cannot be used to post. A webhook may
 * also have a signing secret, which every request must then prove it knows.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../../core/clock.js';
import { MatrixError, rateLimitedError } from '../../core/errors.js';
import type { RateLimiter } from '../../ratelimit/rate-limiter.js';
import { BoundedCache } from '../../core/bounded-cache.js';
import type { BridgeStorage, WebhookRow } from '../../storage/bridge-store.js';
import { hashToken } from '../../users/secrets.js';
import type { BridgePoster } from '../poster.js';
import type { Sender } from './renderers/index.js';
import { checkSignature, openSecret, sealSecret } from './secrets.js';

/**
 * The renderers, with sanitize-html and the emoji table, are loaded on the first delivery rather
 * than at start: they are a third of the server's code, and many deployments never get a webhook.
 */
let renderers: Promise<typeof import('./renderers/index.js')> | undefined;
function loadRenderers(): Promise<typeof import('./renderers/index.js')> {
  // A failed load (the chunk replaced by an upgrade in place, no file descriptors left) is tried
  // again on the next delivery rather than remembered.
  renderers ??= import('./renderers/index.js').catch((err: unknown) => {
    renderers = undefined;
    throw err;
  });
  return renderers;
}

const NOT_FOUND = 'No such webhook: it was never created, or it has been removed.';
/** Webhooks one room may have. */
export const MAX_WEBHOOKS_PER_ROOM = 50;
const MAX_CACHED_WEBHOOKS = 10_000;

export type CreatedWebhook = { id: string } | { refused: string };

/** A request to a webhook URL, as the HTTP layer hands it over. */
export interface WebhookDelivery {
  headers: Readonly<Record<string, string | string[] | undefined>>;
  /** The bytes as sent: signatures are computed over them. */
  rawBody: Buffer;
  /**
   * The parsed JSON (for form posts, the `payload=` field parsed); throws M_NOT_JSON. Called only
   * once the request is known to be for a webhook and signed when it must be.
   */
  payload: () => unknown;
  /** Told the webhook's name once the id is known (logs name it by that: the id is a secret). */
  found?: (name: string) => void;
}

export type ReceivedWebhook =
  | {
      eventId: string;
      sender: Sender;
      /** Set when the sender's renderer failed and the generic rendering was posted instead. */
      rendererError?: unknown;
    }
  /** Deliberately not posted (a duplicate, an unfinished run): why. */
  | { skipped: string; sender: Sender };

export interface WebhookSummary {
  name: string;
  signed: boolean;
}

export class WebhookService {
  /**
   * Webhook rows by id hash, so that a delivery costs no query. Every change to webhooks goes
   * through this service, which empties it after each; a lookup that raced with a change is not
   * kept (the generation check). Unknown ids are not remembered: anyone can send those.
   */
  private readonly rows = new BoundedCache<string, WebhookRow>(MAX_CACHED_WEBHOOKS);

  constructor(
    private readonly storage: BridgeStorage,
    private readonly clock: Clock,
    private readonly limiter: RateLimiter,
    private readonly poster: BridgePoster,
  ) {}

  /** Creates a webhook, with a signing secret if given: its secret id, or why it was refused. */
  async create(roomId: string, name: string, createdBy: string, secret?: string): Promise<CreatedWebhook> {
    const taken = { refused: `This room already has a webhook named "${name}". Remove it first, or choose another name.` };
    const existing = await this.storage.bridge.webhooksOfRoom(roomId);
    if (existing.some((row) => row.name === name)) return taken;
    if (existing.length >= MAX_WEBHOOKS_PER_ROOM) {
      return { refused: `This room has ${MAX_WEBHOOKS_PER_ROOM} webhooks, the most it may; remove one first.` };
    }
    const id = newWebhookId();
    const idHash = hashToken(id);
    const created = await this.changingWebhooks(() => this.storage.bridge.insertWebhook({
      id_hash: idHash,
      room_id: roomId,
      name,
      created_by: createdBy,
      created_ts: this.clock.now(),
      secret_sealed: secret === undefined ? null : sealSecret(id, idHash, secret),
    }));
    // The unique index decides between two creations of one name at once.
    return created ? { id } : taken;
  }

  /**
   * Gives an existing webhook a new URL sealing a new secret (the secret is sealed with the id,
   * which is stored only as a hash, so a secret cannot be added without a new id). Undefined when
   * the room has no webhook of that name.
   */
  async rekey(roomId: string, name: string, secret: string): Promise<{ id: string } | undefined> {
    const id = newWebhookId();
    const idHash = hashToken(id);
    const rekeyed = await this.changingWebhooks(() => this.storage.bridge.rekeyWebhook(roomId, name, idHash, sealSecret(id, idHash, secret)));
    return rekeyed ? { id } : undefined;
  }

  /** Lets a webhook take requests without a signature again; false when there is no such webhook. */
  async clearSecret(roomId: string, name: string): Promise<boolean> {
    return this.changingWebhooks(() => this.storage.bridge.clearWebhookSecret(roomId, name));
  }

  async list(roomId: string): Promise<WebhookSummary[]> {
    return (await this.storage.bridge.webhooksOfRoom(roomId)).map((row) => ({ name: row.name, signed: row.secret_sealed !== null }));
  }

  async remove(roomId: string, name: string): Promise<boolean> {
    return (await this.changingWebhooks(() => this.storage.bridge.deleteWebhook(roomId, name))) !== undefined;
  }

  /** The bridge left the room: its webhooks stop for good (a new invite does not revive them). */
  async removeAllOf(roomId: string): Promise<number> {
    return (await this.changingWebhooks(() => this.storage.bridge.deleteWebhooksOfRoom(roomId))).length;
  }

  /** Renders a delivery and posts it to the webhook's room; resolves once the event is stored. */
  async receive(id: string, delivery: WebhookDelivery): Promise<ReceivedWebhook> {
    const idHash = hashToken(id);
    const webhook = await this.webhookByHash(idHash);
    // Also 404 between the bridge being kicked and its sync loop noticing.
    if (!webhook || !(await this.poster.isActiveIn(webhook.room_id))) throw new MatrixError('M_NOT_FOUND', NOT_FOUND);
    delivery.found?.(webhook.name);
    // Before reading the body, and before the rate limit: requests without the secret cost little
    // and must not use up the sender's allowance.
    if (webhook.secret_sealed !== null) verifySignature(id, webhook.id_hash, webhook.secret_sealed, delivery);
    const payload = delivery.payload();
    const decision = this.limiter.check(idHash);
    if (!decision.allowed) throw rateLimitedError(decision.retryAfterMs);
    const { renderWebhook } = await loadRenderers();
    const rendered = renderWebhook({ headers: delivery.headers, payload });
    if ('skipped' in rendered) return rendered;
    const eventId = await this.poster.post(webhook.room_id, rendered.content);
    return { eventId, sender: rendered.sender, ...(rendered.rendererError === undefined ? {} : { rendererError: rendered.rendererError }) };
  }

  private async webhookByHash(idHash: string): Promise<WebhookRow | undefined> {
    const known = this.rows.get(idHash);
    if (known) return known;
    const generation = this.rows.generation;
    const row = await this.storage.bridge.webhookByHash(idHash);
    if (row) this.rows.setIfUnchanged(idHash, row, generation);
    return row;
  }

  /** Another process changed the webhooks: every cached row is read again. */
  forgetCached(): void {
    this.rows.invalidate();
  }

  /** Runs a change to the webhook tables, then forgets every cached row (changes are rare). */
  private async changingWebhooks<T>(change: () => Promise<T>): Promise<T> {
    try {
      return await change();
    } finally {
      this.rows.invalidate();
    }
  }
}

function newWebhookId(): string {
  return randomBytes(32).toString('base64url');
}

function verifySignature(id: string, idHash: string, sealed: string, delivery: WebhookDelivery): void {
  const secret = openSecret(id, idHash, sealed);
  if (secret === undefined) throw new MatrixError('M_FORBIDDEN', 'This webhook\'s secret cannot be read; set a new one with "!bridge webhook <name> secret".');
  const parsed = () => {
    try {
      return delivery.payload();
    } catch {
      return undefined;
    }
  };
  const check = checkSignature(secret, delivery.headers, delivery.rawBody, parsed);
  if (check.ok) return;
  if (check.reason === 'missing') {
    throw new MatrixError(
      'M_UNAUTHORIZED',
      'This webhook has a secret: sign the request (X-Hub-Signature-256, X-Gitea-Signature, Sentry-Hook-Signature) or send the secret (X-Gitlab-Token, Authorization: Bearer).',
    );
  }
  throw new MatrixError('M_FORBIDDEN', `The request's ${check.scheme} does not match this webhook's secret.`);
}
