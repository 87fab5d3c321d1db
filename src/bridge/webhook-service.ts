/**
 * Incoming webhooks. A webhook's id is its only credential: 256 random bits, handed out once (by
 * direct message) and stored as a SHA-256 hash, so the database alone cannot be used to post.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock.js';
import { MatrixError, rateLimitedError } from '../http/errors.js';
import type { RateLimiter } from '../ratelimit/rate-limiter.js';
import type { Storage } from '../storage/index.js';
import { hashToken } from '../users/secrets.js';
import type { BridgePoster } from './poster.js';
import { readWebhookPayload, webhookMessage } from './webhook-message.js';

const NOT_FOUND = 'No such webhook: it was never created, or it has been removed.';
/** Webhooks one room may have. */
export const MAX_WEBHOOKS_PER_ROOM = 50;

export type CreatedWebhook = { id: string } | { refused: string };

export class WebhookService {
  constructor(
    private readonly storage: Storage,
    private readonly clock: Clock,
    private readonly limiter: RateLimiter,
    private readonly poster: BridgePoster,
  ) {}

  /** Creates a webhook: its secret id, or why it was refused. */
  async create(roomId: string, name: string, createdBy: string): Promise<CreatedWebhook> {
    const taken = { refused: `This room already has a webhook named "${name}". Remove it first, or choose another name.` };
    const existing = await this.storage.bridge.webhooksOfRoom(roomId);
    if (existing.some((row) => row.name === name)) return taken;
    if (existing.length >= MAX_WEBHOOKS_PER_ROOM) {
      return { refused: `This room has ${MAX_WEBHOOKS_PER_ROOM} webhooks, the most it may; remove one first.` };
    }
    const id = randomBytes(32).toString('base64url');
    const created = await this.storage.bridge.insertWebhook({
      id_hash: hashToken(id),
      room_id: roomId,
      name,
      created_by: createdBy,
      created_ts: this.clock.now(),
    });
    // The unique index decides between two creations of one name at once.
    return created ? { id } : taken;
  }

  async names(roomId: string): Promise<string[]> {
    return (await this.storage.bridge.webhooksOfRoom(roomId)).map((row) => row.name);
  }

  async remove(roomId: string, name: string): Promise<boolean> {
    return (await this.storage.bridge.deleteWebhook(roomId, name)) !== undefined;
  }

  /** The bridge left the room: its webhooks stop for good (a new invite does not revive them). */
  async removeAllOf(roomId: string): Promise<number> {
    return (await this.storage.bridge.deleteWebhooksOfRoom(roomId)).length;
  }

  /** Posts a webhook's payload to its room; resolves with the event id once stored. */
  async receive(id: string, body: unknown): Promise<string> {
    const idHash = hashToken(id);
    const webhook = await this.storage.bridge.webhookByHash(idHash);
    // Also 404 between the bridge being kicked and its sync loop noticing.
    if (!webhook || !(await this.poster.isActiveIn(webhook.room_id))) throw new MatrixError('M_NOT_FOUND', NOT_FOUND);
    const decision = this.limiter.check(idHash);
    if (!decision.allowed) throw rateLimitedError(decision.retryAfterMs);
    const content = webhookMessage(readWebhookPayload(body));
    return this.poster.post(webhook.room_id, content);
  }
}
