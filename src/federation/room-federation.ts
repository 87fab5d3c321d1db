/**
 * The room side of the Server-Server API as this server serves it: other servers join, leave and
 * knock through make_/send_ (we build the template, they sign, we check and pass it on), invite
 * our users, read events, state and history of rooms they are in, and push transactions of PDUs
 * and EDUs. Every request arrives authenticated (X-Matrix, http/routes/federation.ts); every PDU
 * is checked here (format, signatures, hashes) and by the room side (auth, state, soft fail).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Signer } from '../core/signed-json.js';
import type { ReceiptService } from '../rooms/receipts-service.js';
import { authEventKeys, checkEventAuth, domainOf, type ProposedEvent } from '../rooms/auth-rules.js';
import { allowedRoomIds, chooseAuthoriser, needsAuthoriser } from '../rooms/restricted-joins.js';
import type { EventGraph } from '../rooms/event-graph.js';
import type { JsonObject, StoredEvent } from '../rooms/events.js';
import { cosignPdu, eventIdOf, nextDepth, pduOf, wirePdu, type Pdu } from '../rooms/pdu.js';
import type { RemoteEvents, VerifiedPdu } from '../rooms/remote-events.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import { roomVersion, type RoomVersion } from '../rooms/room-versions.js';
import { serverAllowedByAcl } from '../rooms/server-acl.js';
import type { Storage } from '../storage/index.js';
import type { TypingTracker } from '../sync/typing.js';
import type { FederationClient } from './http-client.js';
import type { KeyRing } from './key-ring.js';
import { checkPdu } from './pdu-checks.js';
import { strippedList, type FederatedMembership } from './membership.js';
import { FetchBudget, type FetchLimits } from './fetch-budget.js';
import { FederatedEventSource } from './remote-source.js';
import type { RateLimiter } from '../ratelimit/rate-limiter.js';
import type { FederationSender } from './sender.js';

export const MAX_TXN_PDUS = 50;
export const MAX_TXN_EDUS = 100;
/** /backfill and /get_missing_events answer at most this many events. */
const MAX_BACKFILL = 100;
const MAX_MISSING_EVENTS = 20;
/** Invites from other servers a user may hold unanswered; more are refused (they are stored). */
export const MAX_PENDING_REMOTE_INVITES = 1000;
/** Transactions are remembered this long, for answering retries. */
const INBOUND_TXN_RETENTION_MS = 86_400_000;
/** How long a process waits for another to answer a transaction both were sent (a sender waits a minute). */
const CLAIMED_TXN_WAIT_MS = 30_000;
/** Remote typing notices last this long unless renewed (Synapse's federation timeout). */
const REMOTE_TYPING_TIMEOUT_MS = 30_000;

export interface RoomFederationDeps {
  signer: Signer;
  storage: Storage;
  cache: RoomCache;
  graph: EventGraph;
  remote: RemoteEvents;
  keyRing: KeyRing;
  client: FederationClient;
  sender: FederationSender;
  typing: TypingTracker;
  receipts: ReceiptService;
  /** Where `m.direct_to_device` EDUs go: the local devices' inboxes. */
  toDevice: { receiveRemote(origin: string, content: JsonObject): Promise<void> };
  /** Where `m.presence` EDUs go. */
  presence: { receiveRemote(origin: string, content: JsonObject): Promise<void> };
  /** Where `m.device_list_update` EDUs go: the users sharing a room learn that keys changed. */
  keys: { receiveDeviceListUpdate(origin: string, content: JsonObject): Promise<void>; receiveSigningKeyUpdate(origin: string, content: JsonObject): Promise<void> };
  clock: Clock;
  /** Whether a local user exists (and is not deactivated). */
  userExists: (userId: string) => Promise<boolean>;
  /** Where memberships in rooms this server is not in are kept. */
  membership: FederatedMembership;
  /** What one inbound request may make us fetch from its sender (federation.inbound_fetch). */
  fetching: { limits: FetchLimits; perOrigin: RateLimiter; requestTimeoutMs: number; maxResponseBytes: number };
  /** Work claimed among several processes on one database (`cluster/`); absent for one process. */
  claims?: { claim(parts: readonly string[]): Promise<(() => void) | undefined> } | undefined;
  log?: FastifyBaseLogger | undefined;
  /** Users erased on deactivation: their events go to other servers redacted. */
  erased?: (() => Promise<ReadonlySet<string>>) | undefined;
}

/** Stands for the redaction of an erased user's event (there is no redaction event). */
const ERASED = '$erased';

type Membership = 'join' | 'leave' | 'knock';

export class RoomFederation {
  private readonly serverName: string;
  /** Transactions being processed, by origin and id: a retry waits for the first. */
  private readonly inflightTxns = new Map<string, Promise<JsonObject>>();

  constructor(private readonly deps: RoomFederationDeps) {
    this.serverName = deps.signer.serverName;
  }

  /** The app's logger, once it exists. */
  useLogger(log: FastifyBaseLogger): void {
    this.deps.log = log;
  }

  // ---- joining, leaving, knocking through us ----

  /** make_join, make_leave, make_knock: an unsigned event the remote user's server fills in and signs. */
  async makeMembership(origin: string, roomId: string, userId: string, membership: Membership, supportedVersions: readonly string[] | undefined): Promise<JsonObject> {
    const room = await this.residentRoom(origin, roomId);
    if (domainOf(userId) !== origin) throw new MatrixError('M_FORBIDDEN', `${origin} cannot ${membership} for ${userId}`);
    const version = room.version;
    if (supportedVersions !== undefined && !supportedVersions.includes(version.id)) {
      throw new MatrixError('M_INCOMPATIBLE_ROOM_VERSION', `The room is version ${version.id}, which ${origin} does not support`, { status: 400, extra: { room_version: version.id } });
    }
    if (membership === 'knock' && !version.knocking) throw new MatrixError('M_FORBIDDEN', `Room version ${version.id} has no knocking`);
    const content: JsonObject = { membership };
    if (membership === 'join') {
      const via = await this.authorisingUser(room, userId);
      if (via) content.join_authorised_via_users_server = via;
    }
    const proposed: ProposedEvent = { type: 'm.room.member', state_key: userId, sender: userId, content, prev_events: [...room.head.extremities] };
    const auth = checkEventAuth(proposed, room.lookup, version, { isSignedBy: () => true });
    if (!auth.allowed) throw new MatrixError('M_FORBIDDEN', auth.reason);
    const authEvents = authEventKeys(proposed, version).flatMap(([type, stateKey]) => room.get(type, stateKey)?.eventId ?? []);
    const template: JsonObject = {
      room_id: roomId,
      sender: userId,
      type: 'm.room.member',
      state_key: userId,
      content,
      origin_server_ts: this.deps.clock.now(),
      depth: nextDepth(room.head.depth),
      prev_events: room.head.extremities.slice(0, 10),
      auth_events: authEvents,
    };
    return { event: wirePdu(template, version), room_version: version.id };
  }

  /**
   * For a restricted room: a local member who may invite, named in the join as the one who
   * authorises it, when the user is in one of the rooms the join rule allows (rooms we know).
   */
  private async authorisingUser(room: RoomSnapshot, userId: string): Promise<string | undefined> {
    if (!needsAuthoriser(room, userId)) return undefined;
    return chooseAuthoriser(room, this.serverName, await this.inAllowedRoom(room, userId));
  }

  /** Whether the user is joined to one of the rooms a restricted join rule allows (rooms we know). */
  private async inAllowedRoom(room: RoomSnapshot, userId: string): Promise<boolean> {
    for (const allowedId of allowedRoomIds(room)) {
      if ((await this.deps.cache.room(allowedId))?.isJoined(userId)) return true;
    }
    return false;
  }

  /**
   * send_join, send_leave, send_knock: the signed event comes back; it is checked, stored and
   * passed on to the room's other servers. A join is answered with the room's state before it
   * and the auth chain, which the joining server checks in turn.
   */
  async sendMembership(origin: string, roomId: string, eventId: string, raw: unknown, membership: Membership): Promise<JsonObject> {
    const room = await this.residentRoom(origin, roomId);
    const version = room.version;
    const checked = await checkPdu(raw, version, roomId, this.deps.keyRing);
    if ('dropped' in checked) throw refusedPdu(checked, 'The event');
    let verified: VerifiedPdu = checked.verified;
    const { pdu } = verified;
    if (verified.eventId !== eventId) throw new MatrixError('M_INVALID_PARAM', 'The event id in the path is not the event\u2019s');
    if (pdu.type !== 'm.room.member' || pdu.state_key !== pdu.sender || pdu.content.membership !== membership) {
      throw new MatrixError('M_BAD_JSON', `Not a ${membership} event of its sender`);
    }
    if (domainOf(pdu.sender) !== origin) throw new MatrixError('M_FORBIDDEN', `${origin} cannot send a ${membership} for ${pdu.sender}`);
    let signedByUs: Pdu | undefined;
    const via = pdu.content.join_authorised_via_users_server;
    if (membership === 'join' && typeof via === 'string' && domainOf(via) === this.serverName && version.restrictedJoins) {
      // Vouching is ours to give: checked again here, as make_join did (a server can sign any join
      // it likes and skip make_join), before our signature goes on it.
      if (needsAuthoriser(room, pdu.sender) && !(await this.inAllowedRoom(room, pdu.sender))) {
        throw new MatrixError('M_FORBIDDEN', 'You do not belong to any of the required rooms/spaces to join this room.');
      }
      signedByUs = cosignPdu(pdu, version, this.deps.signer);
      verified = { eventId, pdu: signedByUs, signers: new Set([...(verified.signers ?? []), this.serverName]) };
    }
    const { outcomes } = await this.deps.remote.ingest(roomId, [verified], this.sourceFor(origin, room, this.budgetFor(origin)), { fanOut: true });
    const outcome = outcomes.get(eventId);
    if (outcome !== undefined) throw new MatrixError('M_FORBIDDEN', `The ${membership} is not allowed: ${outcome}`);
    if (membership === 'leave') return {};
    const stored = await this.deps.graph.event(eventId);
    if (!stored) throw new Error('the event just stored is gone');
    if (membership === 'knock') {
      const knockState = room.strippedState();
      return { knock_room_state: knockState, knock_state_events: knockState };
    }
    const stateIds = [...((await this.deps.graph.stateBefore(stored)) ?? new Map<string, string>()).values()];
    const { events: authChain } = await this.deps.graph.authChain([...stateIds, eventId]);
    const state = await this.deps.graph.events(stateIds);
    return {
      origin: this.serverName,
      state: this.pdus([...state.values()], version),
      auth_chain: this.pdus([...authChain.values()], version),
      members_omitted: false,
      servers_in_room: [...room.joinedServers()],
      ...(signedByUs ? { event: wirePdu(signedByUs, version) } : {}),
    };
  }

  // ---- invites to our users ----

  /** PUT /invite/v2: another server invites one of our users; we countersign and keep the invite. */
  async receiveInvite(origin: string, roomId: string, eventId: string, body: { room_version?: unknown; event?: unknown; invite_room_state?: unknown }): Promise<JsonObject> {
    const versionId = typeof body.room_version === 'string' ? body.room_version : '1';
    const version = roomVersion(versionId);
    if (!version) {
      throw new MatrixError('M_INCOMPATIBLE_ROOM_VERSION', `Room version ${versionId} is not supported here`, { status: 400, extra: { room_version: versionId } });
    }
    // The room's ACL first, as Synapse: a denied server learns nothing of what else is wrong.
    const room = await this.deps.cache.room(roomId);
    if (room && !serverAllowedByAcl(room.lookup, origin)) throw new MatrixError('M_FORBIDDEN', 'Server is banned from this room');
    const checked = await checkPdu(body.event, version, roomId, this.deps.keyRing);
    if ('dropped' in checked) throw refusedPdu(checked, 'The invite');
    const { pdu } = checked.verified;
    if (checked.verified.eventId !== eventId) throw new MatrixError('M_INVALID_PARAM', 'The event id in the path is not the event\u2019s');
    if (pdu.type !== 'm.room.member' || pdu.content.membership !== 'invite' || pdu.state_key === undefined) throw new MatrixError('M_BAD_JSON', 'Not an invite');
    if (domainOf(pdu.sender) !== origin) throw new MatrixError('M_FORBIDDEN', `${origin} cannot invite on behalf of ${pdu.sender}`);
    const invitee = pdu.state_key;
    if (domainOf(invitee) !== this.serverName) throw new MatrixError('M_FORBIDDEN', `${invitee} is not a user of this server`);
    const resident = room !== undefined && this.isResident(room);
    // An invite kept here (a room we are not in) must be for a user we have. In a room we are in,
    // the invite reaches us again as a PDU of the room and goes by its auth rules, as Synapse
    // countersigns it whoever it names.
    if (!resident && !(await this.deps.userExists(invitee))) throw new MatrixError('M_NOT_FOUND', `Unknown user ${invitee}`);
    const signed = cosignPdu(pdu, version, this.deps.signer);
    // In a room we are in, the invite reaches us again as a PDU of the room, and the user sees it
    // from the room's state; otherwise it is kept with the stripped state the inviter sent.
    if (!resident) {
      if ((await this.deps.storage.federation.pendingRemoteInvites(invitee)) >= MAX_PENDING_REMOTE_INVITES) {
        throw new MatrixError('M_FORBIDDEN', `${invitee} has too many invites waiting for an answer`);
      }
      await this.keepInvite(roomId, invitee, eventId, version, signed, body.invite_room_state);
    }
    return { event: wirePdu(signed, version) };
  }

  private async keepInvite(roomId: string, invitee: string, eventId: string, version: RoomVersion, signed: Pdu, inviteRoomState: unknown): Promise<void> {
    await this.deps.membership.recordOutOfRoom(roomId, invitee, 'invite', eventId, version, JSON.stringify(strippedList(inviteRoomState)), signed);
  }

  /**
   * PDUs of a room this server is not in are not ours to check, except one: the withdrawal of an
   * invite (or the refusal of a knock) of one of our users, which their server is told of. It must
   * be signed by the origin, whose invite (or the room it knocked on) we hold.
   */
  private async outOfRoomMemberships(origin: string, roomId: string, raws: readonly unknown[]): Promise<void> {
    for (const raw of raws) {
      const pdu = raw as Partial<Pdu>;
      if (pdu.type !== 'm.room.member' || typeof pdu.state_key !== 'string' || domainOf(pdu.state_key) !== this.serverName) continue;
      const membership = (pdu.content as JsonObject | undefined)?.membership;
      if (membership !== 'leave' && membership !== 'ban') continue;
      const kept = await this.deps.storage.federation.remoteMembership(roomId, pdu.state_key);
      if (!kept || (kept.membership !== 'invite' && kept.membership !== 'knock')) continue;
      const version = roomVersion(kept.room_version);
      if (!version || typeof pdu.sender !== 'string' || domainOf(pdu.sender) !== origin) continue;
      const checked = await checkPdu(raw, version, roomId, this.deps.keyRing);
      if (!('verified' in checked)) continue;
      await this.deps.membership.recordOutOfRoom(roomId, pdu.state_key, membership, checked.verified.eventId, version, kept.stripped_state, checked.verified.pdu);
    }
  }

  // ---- reading rooms ----

  /** GET /event/{eventId}: one event, to a server that may see it. */
  async event(origin: string, eventId: string): Promise<JsonObject> {
    const event = await this.deps.graph.event(eventId);
    const room = event ? await this.deps.cache.room(event.roomId) : undefined;
    if (!event || !room || room.legacy || !(await this.maySee(origin, room, event))) throw new MatrixError('M_NOT_FOUND', 'Event not found');
    return this.transactionOf(await this.withErasure([event]), room.version);
  }

  /** /state and /state_ids: the room's state before an event, and its auth chain. */
  async stateAt(origin: string, roomId: string, eventId: string, idsOnly: boolean): Promise<JsonObject> {
    const room = await this.roomWithMemberOf(origin, roomId);
    const event = await this.deps.graph.event(eventId);
    // A rejected event has no state of its own to give (Synapse: 404 too).
    if (!event || event.roomId !== roomId || event.outlier || event.rejected !== undefined) throw new MatrixError('M_NOT_FOUND', 'Event not found in this room');
    const before = await this.deps.graph.stateBefore(event);
    if (!before) throw new MatrixError('M_NOT_FOUND', 'The state at this event is not known here');
    const stateIds = [...before.values()];
    const { events: chain } = await this.deps.graph.authChain(stateIds);
    if (idsOnly) return { pdu_ids: stateIds, auth_chain_ids: [...chain.keys()] };
    const state = await this.deps.graph.events(stateIds);
    return { pdus: this.pdus([...state.values()], room.version), auth_chain: this.pdus([...chain.values()], room.version) };
  }

  /** GET /event_auth/{roomId}/{eventId}: the event's auth chain. */
  async eventAuth(origin: string, roomId: string, eventId: string): Promise<JsonObject> {
    const room = await this.roomWithMemberOf(origin, roomId);
    const event = await this.deps.graph.event(eventId);
    if (!event || event.roomId !== roomId) throw new MatrixError('M_NOT_FOUND', 'Event not found in this room');
    const { events } = await this.deps.graph.authChain([eventId]);
    return { auth_chain: this.pdus([...events.values()], room.version) };
  }

  /** GET /backfill/{roomId}: events before `from`, newest first, by walking prev_events. */
  async backfill(origin: string, roomId: string, from: readonly string[], limit: number): Promise<JsonObject> {
    const room = await this.roomWithMemberOf(origin, roomId);
    const events = await this.walkBack(roomId, from, new Set(), Math.min(Math.max(limit, 0), MAX_BACKFILL), true);
    const visible = [];
    for (const event of events) if (await this.maySee(origin, room, event)) visible.push(event);
    return this.transactionOf(await this.withErasure(visible), room.version);
  }

  /** POST /get_missing_events/{roomId}: what lies between `earliest` and `latest`, oldest first. */
  async missingEvents(origin: string, roomId: string, body: { earliest_events: string[]; latest_events: string[]; limit?: number | undefined; min_depth?: number | undefined }): Promise<JsonObject> {
    const room = await this.roomWithMemberOf(origin, roomId);
    const limit = Math.min(Math.max(body.limit ?? 10, 0), MAX_MISSING_EVENTS);
    const latest = await this.deps.graph.events(body.latest_events);
    const starts = [...new Set([...latest.values()].flatMap((event) => event.prevEvents ?? []))];
    const events = await this.walkBack(roomId, starts, new Set(body.earliest_events), limit, true, body.min_depth ?? 0);
    const visible = [];
    for (const event of events) if (await this.maySee(origin, room, event)) visible.push(event);
    visible.sort((a, b) => a.depth - b.depth);
    return { events: this.pdus(await this.withErasure(visible), room.version) };
  }

  /** Breadth first through prev_events from `starts` (included when `inclusive`), deepest first. */
  private async walkBack(roomId: string, starts: readonly string[], stop: ReadonlySet<string>, limit: number, inclusive: boolean, minDepth = 0): Promise<StoredEvent[]> {
    const result: StoredEvent[] = [];
    const seen = new Set<string>(stop);
    let frontier = starts.filter((id) => !seen.has(id));
    for (const id of frontier) seen.add(id);
    while (frontier.length > 0 && result.length < limit) {
      const found = await this.deps.graph.events(frontier);
      const layer = [...found.values()].filter((event) => event.roomId === roomId && event.rejected === undefined).sort((a, b) => b.depth - a.depth);
      const next: string[] = [];
      for (const event of layer) {
        if (result.length >= limit) break;
        if (event.depth < minDepth) continue;
        if (inclusive) result.push(event);
        for (const prev of event.prevEvents ?? []) {
          if (!seen.has(prev)) {
            seen.add(prev);
            next.push(prev);
          }
        }
      }
      frontier = next;
    }
    return result;
  }

  // ---- transactions ----

  /** PUT /send/{txnId}: PDUs and EDUs from `origin`, answered once per transaction id. */
  async transaction(origin: string, txnId: string, body: { origin?: string | undefined; pdus?: unknown[] | undefined; edus?: unknown[] | undefined }): Promise<JsonObject> {
    // The signed request says who sent it; a body that claims another origin is not believed.
    if (body.origin !== undefined && body.origin !== origin) throw new MatrixError('M_FORBIDDEN', `The transaction says it is from ${body.origin}, the request was signed by ${origin}`);
    const key = `${origin}\u0000${txnId}`;
    const inflight = this.inflightTxns.get(key);
    if (inflight) return inflight;
    const pdus = body.pdus ?? [];
    const edus = body.edus ?? [];
    if (pdus.length > MAX_TXN_PDUS || edus.length > MAX_TXN_EDUS) {
      throw new MatrixError('M_BAD_JSON', `A transaction holds at most ${MAX_TXN_PDUS} PDUs and ${MAX_TXN_EDUS} EDUs`);
    }
    const apply = async (): Promise<JsonObject> => {
      this.deps.sender.destinationIsUp(origin);
      const budget = this.budgetFor(origin);
      const results = await this.applyPdus(origin, pdus, budget);
      if (budget.exhausted()) this.deps.log?.info({ origin, txnId, fetched: budget.usage }, 'federation: a transaction used up what it may make us fetch');
      await this.applyEdus(origin, edus);
      const response = { pdus: results };
      await this.deps.storage.federation.recordInboundTxn(origin, txnId, JSON.stringify(response), this.deps.clock.now());
      return response;
    };
    const work = this.onceAcrossProcesses(origin, txnId, apply);
    this.inflightTxns.set(key, work);
    try {
      return await work;
    } finally {
      this.inflightTxns.delete(key);
    }
  }

  /**
   * Applies a transaction unless it was answered already. With several processes on one database
   * a retry can reach another process while the first still applies it (to-device messages in it
   * would be delivered twice): the transaction is claimed first, and a process that finds it
   * claimed waits for the answer the other records, or claims it once the other let go. (While a
   * process has no connection to the others it cannot claim, and applies unclaimed: see
   * `Cluster.claim`.)
   */
  private async onceAcrossProcesses(origin: string, txnId: string, apply: () => Promise<JsonObject>): Promise<JsonObject> {
    const { storage, claims } = this.deps;
    const answered = async () => {
      const seen = await storage.federation.inboundTxn(origin, txnId);
      return seen === undefined ? undefined : (JSON.parse(seen) as JsonObject);
    };
    const giveUpAt = performance.now() + CLAIMED_TXN_WAIT_MS;
    let pause = 25;
    for (;;) {
      const before = await answered();
      if (before) return before;
      if (!claims) return apply();
      const release = await claims.claim(['inbound-txn', origin, txnId]);
      if (release) {
        try {
          // The other process may have answered and let go between the look and the claim.
          return (await answered()) ?? (await apply());
        } finally {
          release();
        }
      }
      if (performance.now() > giveUpAt) {
        throw new MatrixError('M_UNKNOWN', 'Another process of this server is still applying this transaction: send it again later', { status: 503 });
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause = Math.min(pause * 2, 500);
    }
  }

  private async applyPdus(origin: string, pdus: readonly unknown[], budget: FetchBudget): Promise<Record<string, JsonObject>> {
    const results: Record<string, JsonObject> = {};
    const byRoom = new Map<string, unknown[]>();
    for (const raw of pdus) {
      const roomId = typeof raw === 'object' && raw !== null ? (raw as JsonObject).room_id : undefined;
      if (typeof roomId !== 'string') continue;
      const list = byRoom.get(roomId) ?? [];
      list.push(raw);
      byRoom.set(roomId, list);
    }
    await Promise.all(
      [...byRoom].map(async ([roomId, raws]) => {
        const room = await this.deps.cache.room(roomId);
        const refuse = (reason: string) => {
          for (const raw of raws) {
            const id = eventIdGuess(raw, room?.version);
            if (id) results[id] = { error: reason };
          }
        };
        if (!room || room.legacy || !this.isResident(room)) {
          await this.outOfRoomMemberships(origin, roomId, raws).catch((err: unknown) => this.deps.log?.debug({ err, roomId }, 'federation: an out-of-room membership was ignored'));
          return refuse('This server is not in the room');
        }
        if (!serverAllowedByAcl(room.lookup, origin)) return refuse('Server is banned from this room');
        const verified: VerifiedPdu[] = [];
        for (const raw of raws) {
          const checked = await checkPdu(raw, room.version, roomId, this.deps.keyRing, budget);
          if ('verified' in checked) verified.push(checked.verified);
          else {
            const id = eventIdGuess(raw, room.version);
            if (id) results[id] = { error: checked.dropped };
          }
        }
        if (verified.length === 0) return;
        try {
          const { outcomes, rejected } = await this.deps.remote.ingest(roomId, verified, this.sourceFor(origin, room, budget));
          for (const event of verified) {
            const outcome = outcomes.get(event.eventId);
            // Judged is answered `{}`, accepted, soft-failed or rejected alike (Synapse's answer):
            // an error is for an event that could not be judged (its prevs or auth events not had).
            results[event.eventId] = outcome === undefined || outcome.startsWith('soft failed') || rejected.has(event.eventId) ? {} : { error: outcome };
          }
        } catch (err) {
          this.deps.log?.warn({ err, roomId, origin }, 'federation: events of a transaction could not be applied');
          for (const event of verified) results[event.eventId] = { error: 'could not be processed' };
        }
      }),
    );
    return results;
  }

  private async applyEdus(origin: string, edus: readonly unknown[]): Promise<void> {
    for (const raw of edus) {
      if (typeof raw !== 'object' || raw === null) continue;
      const { edu_type: type, content } = raw as { edu_type?: unknown; content?: unknown };
      if (typeof type !== 'string' || typeof content !== 'object' || content === null) continue;
      try {
        if (type === 'm.typing') await this.remoteTyping(origin, content as JsonObject);
        else if (type === 'm.receipt') await this.remoteReceipts(origin, content as JsonObject);
        else if (type === 'm.direct_to_device') await this.deps.toDevice.receiveRemote(origin, content as JsonObject);
        else if (type === 'm.presence') await this.deps.presence.receiveRemote(origin, content as JsonObject);
        // A cross-signing key change is a device-list change too: clients ask for the keys again.
        else if (type === 'm.device_list_update') await this.deps.keys.receiveDeviceListUpdate(origin, content as JsonObject);
        else if (type === 'm.signing_key_update') await this.deps.keys.receiveSigningKeyUpdate(origin, content as JsonObject);
        // Anything unknown: accepted, not acted on.
      } catch (err) {
        this.deps.log?.debug({ err, origin, type }, 'federation: an EDU was ignored');
      }
    }
  }

  private async remoteTyping(origin: string, content: JsonObject): Promise<void> {
    const { room_id: roomId, user_id: userId, typing } = content;
    if (typeof roomId !== 'string' || typeof userId !== 'string' || domainOf(userId) !== origin) return;
    const room = await this.deps.cache.room(roomId);
    if (!room || !room.isJoined(userId) || !serverAllowedByAcl(room.lookup, origin)) return;
    this.deps.typing.setTyping(roomId, userId, typing === true, REMOTE_TYPING_TIMEOUT_MS);
  }

  private async remoteReceipts(origin: string, content: JsonObject): Promise<void> {
    for (const [roomId, byType] of Object.entries(content)) {
      const room = await this.deps.cache.room(roomId);
      if (!room || !serverAllowedByAcl(room.lookup, origin) || typeof byType !== 'object' || byType === null) continue;
      const read = (byType as JsonObject)['m.read'];
      if (typeof read !== 'object' || read === null) continue;
      for (const [userId, receipt] of Object.entries(read as JsonObject)) {
        if (domainOf(userId) !== origin || !room.isJoined(userId) || typeof receipt !== 'object' || receipt === null) continue;
        const { event_ids: eventIds, data } = receipt as { event_ids?: unknown; data?: unknown };
        const eventId = Array.isArray(eventIds) ? eventIds.find((id): id is string => typeof id === 'string') : undefined;
        if (!eventId) continue;
        const threadId = typeof data === 'object' && data !== null && typeof (data as JsonObject).thread_id === 'string' ? ((data as JsonObject).thread_id as string) : undefined;
        await this.deps.receipts.setRemoteReceipt(room, userId, eventId, threadId);
      }
    }
  }

  /** Forgets transactions older than a day (run periodically). */
  async pruneTransactions(): Promise<void> {
    await this.deps.storage.federation.pruneInboundTxns(this.deps.clock.now() - INBOUND_TXN_RETENTION_MS);
  }

  // ---- helpers ----

  /** The budget of one inbound request from `origin` (see fetch-budget.ts). */
  private budgetFor(origin: string): FetchBudget {
    const { limits, perOrigin, requestTimeoutMs, maxResponseBytes } = this.deps.fetching;
    return new FetchBudget(limits, this.deps.clock, origin, perOrigin, requestTimeoutMs, maxResponseBytes);
  }

  /**
   * Whom to ask for what `origin`'s events need: `origin` itself, if it has a member in the room.
   * A server with nobody in the room is asked nothing (what it sends must stand on what we have),
   * so it cannot make us fetch, store or wait, nor learn the room's extremities from our questions.
   */
  private sourceFor(origin: string, room: RoomSnapshot, budget: FetchBudget): FederatedEventSource | undefined {
    if (!room.hasJoinedMember(origin)) return undefined;
    return new FederatedEventSource(this.deps.client, this.deps.keyRing, room.version, [origin], budget);
  }

  /** A room this server is in (with at least one joined member), that lets `origin` in. */
  private async residentRoom(origin: string, roomId: string): Promise<RoomSnapshot> {
    const room = await this.deps.cache.room(roomId);
    if (!room || room.legacy || !this.isResident(room)) throw new MatrixError('M_NOT_FOUND', `This server is not in room ${roomId}`);
    if (!serverAllowedByAcl(room.lookup, origin)) throw new MatrixError('M_FORBIDDEN', 'Server is banned from this room');
    return room;
  }

  /**
   * A room we are in that `origin` is in too (a member of its joined now): what the room-scoped
   * reads (/state, /state_ids, /event_auth, /backfill, /get_missing_events) require, as Synapse's
   * `assert_host_in_room`. A server that was never let in learns nothing of the room here.
   */
  private async roomWithMemberOf(origin: string, roomId: string): Promise<RoomSnapshot> {
    const room = await this.residentRoom(origin, roomId);
    if (!room.hasJoinedMember(origin)) throw new MatrixError('M_FORBIDDEN', 'Host not in room.');
    return room;
  }

  private isResident(room: RoomSnapshot): boolean {
    return room.hasJoinedMember(this.serverName);
  }

  /**
   * Whether `origin` may see an event (the server side of history visibility): world_readable
   * events to anyone; otherwise the origin must have a member joined or invited in the state at
   * the event, or (for shared history) be in the room now.
   */
  private async maySee(origin: string, room: RoomSnapshot, event: StoredEvent): Promise<boolean> {
    const visibility = event.historyVisibility;
    if (visibility === 'world_readable') return true;
    if (visibility === 'shared' && room.hasJoinedMember(origin)) return true;
    const state = event.outlier ? undefined : await this.deps.graph.stateAfter(event);
    if (!state) return room.hasJoinedMember(origin);
    const members: string[] = [];
    for (const [key, id] of state) if (key.startsWith('m.room.member\u0000') && domainOf(key.slice('m.room.member\u0000'.length)) === origin) members.push(id);
    if (members.length === 0) return false;
    const events = await this.deps.graph.events(members);
    for (const member of events.values()) {
      const membership = member.content.membership;
      if (membership === 'join' || (membership === 'invite' && visibility !== 'joined')) return true;
    }
    return false;
  }

  /**
   * The events of erased users marked redacted (pduOf then serves them redacted, as Synapse serves
   * them to other servers: no server can say which of its users saw them at the time).
   */
  private async withErasure(events: StoredEvent[]): Promise<StoredEvent[]> {
    const erased = (await this.deps.erased?.()) ?? new Set<string>();
    if (erased.size === 0) return events;
    return events.map((event) => (erased.has(event.sender) && event.redactedBy === undefined ? { ...event, redactedBy: ERASED } : event));
  }

  private pdus(events: readonly StoredEvent[], version: RoomVersion): Pdu[] {
    return events.flatMap((event) => pduOf(event, version) ?? []);
  }

  private transactionOf(events: readonly StoredEvent[], version: RoomVersion): JsonObject {
    return { origin: this.serverName, origin_server_ts: this.deps.clock.now(), pdus: this.pdus(events, version) };
  }
}

/** The most stripped state events an invite may carry (v2's `invite_room_state`, v1's `unsigned.invite_room_state`). */
export const MAX_INVITE_ROOM_STATE = 100;

/**
 * The body of a v1 invite (`PUT /v1/invite`) as a v2 one: the body is the event, and v1 senders
 * put the stripped state in its `unsigned.invite_room_state` (not hashed nor signed, so checkPdu
 * drops it), bounded as v2's `invite_room_state` is.
 */
export function v1InviteBody(body: unknown): { room_version: string; event: unknown; invite_room_state?: unknown } {
  const unsigned = typeof body === 'object' && body !== null ? (body as JsonObject).unsigned : undefined;
  const stripped = typeof unsigned === 'object' && unsigned !== null ? (unsigned as JsonObject).invite_room_state : undefined;
  if (stripped !== undefined && (!Array.isArray(stripped) || stripped.length > MAX_INVITE_ROOM_STATE)) {
    throw new MatrixError('M_BAD_JSON', `unsigned.invite_room_state must be a list of at most ${MAX_INVITE_ROOM_STATE} events`);
  }
  return { room_version: '1', event: body, ...(stripped !== undefined ? { invite_room_state: stripped } : {}) };
}

/** The id a raw PDU would have, to name it in a transaction's answer (undefined if it cannot be computed). */
function eventIdGuess(raw: unknown, version: RoomVersion | undefined): string | undefined {
  if (!version || typeof raw !== 'object' || raw === null) return undefined;
  try {
    // A v1/v2 PDU without an `event_id` has no id to be answered under: it is left out of the answer.
    return eventIdOf(raw as JsonObject, version) || undefined;
  } catch {
    return undefined;
  }
}

/**
 * A PDU handed to us directly (send_join, invite) that failed steps 1 and 2: unsigned is a
 * refusal (403), malformed (floats in a v6 room, a missing field) a bad request (400 M_BAD_JSON),
 * as Synapse answers them.
 */
function refusedPdu(checked: { dropped: string; unsigned: boolean }, what: string): MatrixError {
  return checked.unsigned ? new MatrixError('M_FORBIDDEN', `${what} was refused: ${checked.dropped}`) : new MatrixError('M_BAD_JSON', `${what} was refused: ${checked.dropped}`);
}
