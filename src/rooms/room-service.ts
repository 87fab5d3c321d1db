/**
 * Changing rooms: creating them, membership, sending messages and state, redacting. Every change
 * goes through the event writer, which applies the room auth rules; this service adds what the
 * rules do not know (who exists, transaction ids, idempotent state, aliases).
 */
import { isDeepStrictEqual } from 'node:util';
import type { Clock } from '../core/clock.js';
import type { Config } from '../config/index.js';
import { MatrixError } from '../core/errors.js';
import type { Limiters } from '../ratelimit/limiters.js';
import type { Storage } from '../storage/index.js';
import type { Requester } from '../users/session-service.js';
import { canRedact, checkEventAuth, effectivePowerLevels, userPowerLevel, requiredPowerForEvent } from './auth-rules.js';
import type { EventDraft, EventWriter } from './event-writer.js';
import { toStrippedState, type JsonObject } from './events.js';
import { assertRoomAlias, assertUserId, isRoomAlias, isRoomId, newRoomId, serverOf } from './ids.js';
import { planCreateRoom, type Preset, type StateDraft } from './presets.js';
import { redactedContent } from './redaction.js';
import { roomIdFromCreateEventId } from './pdu.js';
import { DEFAULT_ROOM_VERSION, knownRoomVersion, roomVersion, SUPPORTED_ROOM_VERSIONS } from './room-versions.js';
import type { RoomCache } from './room-cache.js';
import { notInRoom, type RoomReader } from './room-reader.js';
import type { RoomSnapshot } from './room-snapshot.js';
import { TxnLookups, txnKeyText } from './txn-lookups.js';
import type { PublicRoomsQuery, RemoteRooms } from './remote-rooms.js';
import { allowedRoomIds, chooseAuthoriser, needsAuthoriser } from './restricted-joins.js';
import { assertGuestMayJoin, guestCanJoin } from './guest-access.js';


/**
 * The most a `createRoom` may ask for. A room's creation writes one event per initial state entry
 * and per invite, all at once and before any rate limit could stop it halfway; these keep one
 * request to a few hundred events (a bot's rooms need a handful). More invites can follow.
 */
export const MAX_INITIAL_STATE = 100;
export const MAX_CREATE_ROOM_INVITES = 100;

export interface CreateRoomRequest {
  preset?: Preset | undefined;
  visibility?: 'public' | 'private' | undefined;
  name?: string | undefined;
  topic?: string | undefined;
  invite?: string[] | undefined;
  is_direct?: boolean | undefined;
  initial_state?: Array<{ type: string; state_key?: string | undefined; content: JsonObject }> | undefined;
  creation_content?: JsonObject | undefined;
  power_level_content_override?: JsonObject | undefined;
  room_version?: string | undefined;
  room_alias_name?: string | undefined;
}

/** What application services' alias namespaces ask of alias handling. */
export interface AliasNamespaces {
  /** Throws M_EXCLUSIVE when an appservice other than the requester holds the alias exclusively. */
  assertMayClaimAlias(requester: Requester, alias: string): void;
  /** Asks the appservices whose namespaces hold an unknown alias; true when one created it. */
  askAboutAlias(alias: string): Promise<boolean>;
}

/** A join refused right after an invite arrived is tried again this many times, waiting longer each time. */
const INVITE_RACE_ATTEMPTS = 4;
const INVITE_RACE_DELAY_MS = 150;

export class RoomService {
  /** Sends in flight, by user, device and transaction id: a retry racing its original joins it. */
  private readonly inflightTxns = new Map<string, Promise<string>>();
  /** Rooms being created now, whose ids are taken before their rows exist. */
  private readonly creating = new Set<string>();
  /** The tail of each room's queue of alias changes (see withAliasLock). */
  private readonly aliasLocks = new Map<string, Promise<void>>();
  /** Retries are looked up with the concurrent sends' lookups, in one query. */
  private readonly txnLookups: TxnLookups;
  /**
   * Told when a user of ours newly joins a room that is the upgrade of another (its create event
   * names a predecessor): their push rules for the old room are copied (set in services.ts).
   */
  joinedUpgradedRoom?: (userId: string, oldRoomId: string, newRoomId: string) => Promise<void>;

  constructor(
    private readonly storage: Storage,
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly cache: RoomCache,
    private readonly writer: EventWriter,
    private readonly reader: RoomReader,
    private readonly limiters: Limiters,
    /** Rooms of other servers (federation); undefined keeps this server to itself. */
    private readonly remote?: RemoteRooms | undefined,
    /** Application services' alias namespaces (see appservices/). */
    private readonly aliasNamespaces?: AliasNamespaces | undefined,
  ) {
    this.txnLookups = new TxnLookups(storage);
  }

  // ---- creation ----

  /**
   * `POST /createRoom`. `roomId`: an id chosen beforehand (an upgrade names the new room in the
   * old one's tombstone first); only for room versions whose ids are not made from the create event.
   */
  async createRoom(requester: Requester, request: CreateRoomRequest, chosenId?: string): Promise<string> {
    const creator = requester.userId;
    const roomVersion = request.room_version ?? DEFAULT_ROOM_VERSION;
    if (!SUPPORTED_ROOM_VERSIONS.includes(roomVersion)) {
      throw new MatrixError('M_UNSUPPORTED_ROOM_VERSION', `Your homeserver does not support room version ${roomVersion}`);
    }
    const allInvites = [...new Set(request.invite ?? [])];
    for (const userId of allInvites) assertUserId(userId);
    // Users of other servers are invited once the room exists, through their server (which must
    // countersign the invite and then tells them); only local invites go in the creation batch.
    const federated = this.remote !== undefined;
    const invites = allInvites.filter((userId) => !federated || serverOf(userId) === this.config.server_name);
    const remoteInvites = allInvites.filter((userId) => !invites.includes(userId));
    // Counted like messages, as in Synapse, and so are the events it writes beyond the room's own.
    await this.limiters.checkMessage(creator, 1 + (request.initial_state?.length ?? 0) + allInvites.length);
    const inviteProfiles = await Promise.all(invites.map((userId) => this.profileOfExistingUser(userId)));
    for (const state of request.initial_state ?? []) {
      if (state.type === 'm.room.create' || state.type === 'm.room.member') {
        throw new MatrixError('M_INVALID_PARAM', `${state.type} cannot be given in initial_state; use creation_content or invite`);
      }
    }
    const initialState: StateDraft[] = (request.initial_state ?? []).map((s) => ({
      type: s.type,
      stateKey: s.state_key ?? '',
      content: s.content,
    }));
    let alias: string | undefined;
    if (request.room_alias_name !== undefined) {
      alias = `#${request.room_alias_name}:${this.config.server_name}`;
      if (/[:\s]/.test(request.room_alias_name) || request.room_alias_name.length === 0 || !isRoomAlias(alias)) {
        throw new MatrixError('M_INVALID_PARAM', 'Invalid characters in room alias');
      }
      this.aliasNamespaces?.assertMayClaimAlias(requester, alias);
    }
    const planned = planCreateRoom({
      roomVersion,
      creator,
      creatorProfile: await this.profileOf(creator),
      preset: request.preset ?? (request.visibility === 'public' ? 'public_chat' : 'private_chat'),
      creationContent: request.creation_content ?? {},
      powerLevelOverride: request.power_level_content_override,
      canonicalAlias: alias,
      initialState,
      name: request.name,
      topic: request.topic,
      invites: invites.map((userId, i) => ({ userId, profile: inviteProfiles[i]! })),
      isDirect: request.is_direct === true,
    });
    // The create event first: a v12 room's id is made from it; older versions' ids go into it.
    const version = knownRoomVersion(roomVersion);
    const givenId = version.roomIdFromCreateEvent ? undefined : (chosenId ?? newRoomId(this.config.server_name));
    let create = this.writer.buildCreateEvent(version, givenId, creator, planned[0]!.content);
    let roomId = givenId ?? roomIdFromCreateEventId(create.eventId);
    // A v12 room id is a hash of the create event: the same creator making the same room in the
    // same millisecond would make the same room. A later timestamp tells them apart.
    // The id is claimed before the first await, so two creations racing cannot both take it.
    for (;;) {
      if (!this.creating.has(roomId)) {
        this.creating.add(roomId);
        if (!(await this.storage.rooms.getRoom(roomId))) break;
        this.creating.delete(roomId);
      }
      if (chosenId !== undefined) throw new MatrixError('M_ROOM_IN_USE', 'The chosen room id is taken');
      create = this.writer.buildCreateEvent(version, givenId, creator, planned[0]!.content, create.pdu.origin_server_ts + 1);
      roomId = givenId ?? roomIdFromCreateEventId(create.eventId);
    }
    try {
      if (alias !== undefined && !(await this.storage.rooms.insertAlias(alias, roomId, creator))) {
        throw new MatrixError('M_ROOM_IN_USE', 'Room alias already taken');
      }
    } catch (err) {
      this.creating.delete(roomId);
      throw err;
    }
    try {
      await this.writer.submit({
        roomId,
        newRoom: {
          room_id: roomId,
          room_version: roomVersion,
          creator,
          is_public: request.visibility === 'public' ? 1 : 0,
          created_ts: this.clock.now(),
          state_group: null,
        },
        prepare: () => planned.map((e, index) => ({ type: e.type, stateKey: e.stateKey, sender: creator, content: e.content, prebuilt: index === 0 ? create : undefined })),
      });
    } catch (err) {
      if (alias !== undefined) await this.storage.rooms.deleteAlias(alias);
      throw err;
    } finally {
      this.creating.delete(roomId);
    }
    // The creator of an upgraded room is its first member (see afterNewJoin).
    if (request.creation_content?.predecessor !== undefined) await this.afterNewJoin(creator, roomId);
    for (const userId of remoteInvites) await this.inviteRemote(requester, roomId, userId, undefined, request.is_direct === true);
    return roomId;
  }

  // ---- membership ----

  /**
   * Joins by room id or alias; returns the room id. A room this server is not in is joined
   * through other servers: those named (`via`), the alias's, the inviter's and the room id's.
   */
  /**
   * Joins a room. `custom`: the rest of the client's request body, kept in the join's content as
   * Synapse keeps it (a per-room display name, anything of the client's own), except the keys
   * that are the server's to set.
   */
  async join(requester: Requester, roomIdOrAlias: string, reason?: string, via: readonly string[] = [], custom: JsonObject = {}): Promise<string> {
    const extra = clientJoinContent(custom);
    const { roomId, room, candidates } = await this.membershipTarget(requester.userId, roomIdOrAlias, via);
    const wasJoined = (await this.cache.roomsOf(requester.userId)).get(roomId)?.membership === 'join';
    // A room we knew but are no longer in, with nobody to ask, is joined here (it may be ours).
    if (candidates && (candidates.length > 0 || !room)) {
      if (candidates.length === 0) throw new MatrixError('M_NOT_FOUND', 'No known servers');
      const profile = await this.profileOf(requester.userId);
      const content = { ...profile, ...extra, ...(reason !== undefined ? { reason } : {}), ...guestKind(requester) };
      // An invite reaches us before the inviting server has written it (it writes it once we have
      // countersigned it): a bot that joins the moment it is invited can be refused for a moment.
      for (let attempt = 1; ; attempt++) {
        try {
          await this.remote!.join(requester.userId, roomId, candidates, content);
          if (requester.isGuest) await this.leaveUnlessGuestsMayJoin(requester, roomId);
          if (!wasJoined) await this.afterNewJoin(requester.userId, roomId);
          return roomId;
        } catch (err) {
          const refused = err instanceof MatrixError && err.status === 403;
          if (!refused || attempt >= INVITE_RACE_ATTEMPTS || (await this.cache.roomsOf(requester.userId)).get(roomId)?.membership !== 'invite') throw err;
          await new Promise((resolve) => setTimeout(resolve, INVITE_RACE_DELAY_MS * attempt));
        }
      }
    }
    if (!room) throw new MatrixError('M_NOT_FOUND', 'No known servers');
    if (requester.isGuest) assertGuestMayJoin(room);
    const profile = await this.profileOf(requester.userId);
    // A restricted room: a member of ours who may invite vouches for the join.
    const authoriser = needsAuthoriser(room, requester.userId) ? chooseAuthoriser(room, this.config.server_name, await this.isInAnyRoom(requester.userId, allowedRoomIds(room))) : undefined;
    await this.writer.submit({
      roomId,
      prepare: (current) => {
        const previous = current.get('m.room.member', requester.userId)?.content;
        // An invite to a direct chat stays marked as one in the join, as Synapse does.
        const isDirect = current.membership(requester.userId) === 'invite' && previous?.is_direct === true;
        const vouched = authoriser !== undefined && needsAuthoriser(current, requester.userId) ? { join_authorised_via_users_server: authoriser } : {};
        if (requester.isGuest) assertGuestMayJoin(current);
        const draft = memberDraft(requester.userId, requester.userId, { ...profile, ...extra, membership: 'join', ...(isDirect ? { is_direct: true } : {}), ...vouched, ...guestKind(requester) }, reason);
        // Joining again with nothing changed writes nothing, as in Synapse.
        if (current.isJoined(requester.userId) && isDeepStrictEqual(previous, draft.content)) return [];
        return [draft];
      },
    });
    if (!wasJoined) await this.afterNewJoin(requester.userId, roomId);
    return roomId;
  }

  /**
   * A new member of an upgraded room brings along what was theirs in the old one (see
   * joinedUpgradedRoom). And when the old room's tombstone does point here (an upgrade made on
   * another server, which this server follows as its first user joins), this server's aliases of
   * the old room move over and a directory listing changes rooms, as Synapse does.
   */
  private async afterNewJoin(userId: string, roomId: string): Promise<void> {
    const predecessor = (await this.cache.room(roomId))?.get('m.room.create')?.content.predecessor as JsonObject | undefined;
    const oldRoomId = predecessor?.room_id;
    if (typeof oldRoomId !== 'string' || oldRoomId === roomId) return;
    // The join is done; a failure here is not the join's.
    try {
      const oldRoom = await this.cache.room(oldRoomId);
      if (oldRoom?.get('m.room.tombstone')?.content.replacement_room === roomId) {
        for (const alias of await this.storage.rooms.aliasesOfRoom(oldRoomId)) {
          await this.withAliasLock(oldRoomId, async () => {
            await this.storage.rooms.deleteAlias(alias);
            await this.storage.rooms.insertAlias(alias, roomId, userId);
          });
        }
        if ((await this.storage.rooms.getRoom(oldRoomId))?.is_public === 1) {
          await this.storage.rooms.setRoomPublic(roomId, true);
          await this.storage.rooms.setRoomPublic(oldRoomId, false);
        }
      }
      await this.joinedUpgradedRoom?.(userId, oldRoomId, roomId);
    } catch {
      // Best effort, as in Synapse.
    }
  }

  /**
   * A guest's join of another server's room: whether guests may join shows only in the state the
   * join brought (the make_join template carries none), so a guest who may not stays no longer
   * than it takes to leave, and is told 403 as for a room of ours.
   */
  private async leaveUnlessGuestsMayJoin(requester: Requester, roomId: string): Promise<void> {
    const room = await this.cache.room(roomId);
    if (room && guestCanJoin(room)) return;
    await this.leave(requester, roomId).catch(() => undefined);
    throw new MatrixError('M_FORBIDDEN', 'Guest access not allowed');
  }

  async invite(requester: Requester, roomId: string, target: string, reason?: string): Promise<void> {
    assertUserId(target);
    if (serverOf(target) !== this.config.server_name && this.remote) {
      await this.inviteRemote(requester, roomId, target, reason);
      return;
    }
    const profile = await this.profileOfExistingUser(target);
    await this.reader.roomOrForbidden(roomId, requester.userId);
    await this.writer.submit({
      roomId,
      prepare: () => [memberDraft(requester.userId, target, { ...profile, membership: 'invite' }, reason)],
    });
  }

  /**
   * Knocks on a room (room versions 7 and later, join rule `knock`); one this server is not in is
   * knocked on through other servers, as a join would be.
   */
  async knock(requester: Requester, roomIdOrAlias: string, reason: string | undefined, via: readonly string[] = []): Promise<string> {
    const { roomId, room, candidates } = await this.membershipTarget(requester.userId, roomIdOrAlias, via);
    if (candidates && (candidates.length > 0 || !room)) {
      if (candidates.length === 0) throw new MatrixError('M_NOT_FOUND', 'No known servers');
      const profile = await this.profileOf(requester.userId);
      await this.remote!.knock(requester.userId, roomId, candidates, { ...profile, ...(reason !== undefined ? { reason } : {}) });
      return roomId;
    }
    if (!room) throw new MatrixError('M_NOT_FOUND', 'No known servers');
    const profile = await this.profileOf(requester.userId);
    await this.writer.submit({ roomId, prepare: () => [memberDraft(requester.userId, requester.userId, { ...profile, membership: 'knock' }, reason)] });
    return roomId;
  }

  /**
   * A user of another server is invited in two steps: the invite is built and checked here, their
   * server countersigns it, and then it is written (on whatever the room's head is by then).
   */
  private async inviteRemote(requester: Requester, roomId: string, target: string, reason: string | undefined, isDirect = false): Promise<void> {
    const room = await this.reader.roomOrForbidden(roomId, requester.userId);
    if (room.legacy) throw new MatrixError('M_FORBIDDEN', 'This room was made before federation here and stays local');
    assertAllowed(room, memberDraft(requester.userId, target, { membership: 'invite' }, reason));
    // The invitee's name and avatar, as their server tells them (Synapse's include_profile_data_on_invite).
    const profile = (await this.remote!.profile(target)) ?? {};
    const draft = memberDraft(requester.userId, target, { ...profile, membership: 'invite', ...(isDirect ? { is_direct: true } : {}) }, reason);
    if (room.membership(target) === 'invite') return;
    const built = await this.writer.preview(roomId, draft);
    const stripped = inviteStateOf(room, requester.userId);
    const signed = await this.remote!.countersignInvite(roomId, room.version, built, stripped);
    await this.writer.submit({ roomId, prepare: () => [{ ...draft, prebuilt: { pdu: signed, eventId: built.eventId } }] });
  }

  /**
   * The room a join or knock is for (an alias of another server is asked there), and, when this
   * server is not in it, the servers to go through (`candidates`; undefined when it is local).
   */
  private async membershipTarget(userId: string, roomIdOrAlias: string, via: readonly string[]): Promise<{ roomId: string; room: RoomSnapshot | undefined; candidates: string[] | undefined }> {
    let roomId: string;
    const servers = [...via];
    if (isRoomAlias(roomIdOrAlias) && serverOf(roomIdOrAlias) !== this.config.server_name && this.remote) {
      const resolved = await this.remote.resolveAlias(roomIdOrAlias);
      roomId = resolved.roomId;
      servers.push(...resolved.servers);
    } else {
      roomId = await this.resolveRoom(roomIdOrAlias);
    }
    const room = await this.cache.room(roomId);
    const remote = this.remote !== undefined && (!room || (!room.legacy && !this.isResident(room)));
    return { roomId, room, candidates: remote ? await this.remoteCandidates(userId, roomId, room, servers) : undefined };
  }

  private async isInAnyRoom(userId: string, roomIds: readonly string[]): Promise<boolean> {
    const rooms = await this.cache.roomsOf(userId);
    return roomIds.some((roomId) => rooms.get(roomId)?.membership === 'join');
  }

  /** Whether a member of this server is joined: the room's events reach us and we may build on them. */
  private isResident(room: RoomSnapshot): boolean {
    for (const server of room.joinedServers()) if (server === this.config.server_name) return true;
    return false;
  }

  /** Servers to join or leave a room through, best first. */
  private async remoteCandidates(userId: string, roomId: string, room: RoomSnapshot | undefined, named: readonly string[]): Promise<string[]> {
    const candidates = [...named];
    const kept = await this.storage.federation.remoteMembership(roomId, userId);
    if (kept) candidates.push(serverOf(JSON.parse(kept.pdu).sender as string));
    const own = room?.get('m.room.member', userId);
    if (own) candidates.push(serverOf(own.sender));
    if (room) candidates.push(...room.joinedServers());
    if (!room?.version.roomIdFromCreateEvent && roomId.includes(':')) candidates.push(serverOf(roomId));
    return [...new Set(candidates)].filter((server) => server !== this.config.server_name);
  }

  async leave(requester: Requester, roomId: string, reason?: string): Promise<void> {
    const room = await this.cache.room(roomId);
    if (this.remote && (!room || (!room.legacy && !this.isResident(room)))) {
      // An invite to a room this server is not in: rejected through the inviting server.
      const entry = (await this.cache.roomsOf(requester.userId)).get(roomId);
      if (entry?.membership === 'invite' || entry?.membership === 'knock') {
        await this.remote.leave(requester.userId, roomId, await this.remoteCandidates(requester.userId, roomId, room, []), reason);
        return;
      }
    }
    if (!room || room.membership(requester.userId) === 'leave') {
      // Synapse answers a leave from a room one is not in with success when there is nothing to do.
      if (room && (await this.cache.roomsOf(requester.userId)).has(roomId)) return;
      throw notInRoom(requester.userId, roomId);
    }
    await this.writer.submit({
      roomId,
      prepare: () => [memberDraft(requester.userId, requester.userId, { membership: 'leave' }, reason)],
    });
  }

  async kick(requester: Requester, roomId: string, target: string, reason?: string): Promise<void> {
    assertUserId(target);
    await this.reader.roomOrForbidden(roomId, requester.userId);
    await this.writer.submit({
      roomId,
      prepare: (room) => {
        const draft = memberDraft(requester.userId, target, { membership: 'leave' }, reason);
        // The auth rules first, so someone without the power learns nothing about the target.
        assertAllowed(room, draft);
        const membership = room.membership(target);
        if (membership !== 'join' && membership !== 'invite' && membership !== 'knock') {
          throw new MatrixError('M_FORBIDDEN', `${target} is not in the room`);
        }
        return [draft];
      },
    });
  }

  async ban(requester: Requester, roomId: string, target: string, reason?: string): Promise<void> {
    assertUserId(target);
    await this.reader.roomOrForbidden(roomId, requester.userId);
    await this.writer.submit({
      roomId,
      prepare: () => [memberDraft(requester.userId, target, { membership: 'ban' }, reason)],
    });
  }

  async unban(requester: Requester, roomId: string, target: string, reason?: string): Promise<void> {
    assertUserId(target);
    await this.reader.roomOrForbidden(roomId, requester.userId);
    await this.writer.submit({
      roomId,
      prepare: (room) => {
        const draft = memberDraft(requester.userId, target, { membership: 'leave' }, reason);
        if (room.membership(target) !== 'ban') {
          assertAllowed(room, { ...draft, content: { membership: 'ban' } });
          throw new MatrixError('M_FORBIDDEN', `${target} is not banned`);
        }
        return [draft];
      },
    });
  }

  async forget(requester: Requester, roomId: string): Promise<void> {
    const rooms = await this.cache.roomsOf(requester.userId);
    const entry = rooms.get(roomId);
    if (!entry) throw new MatrixError('M_NOT_FOUND', 'Room not found or not a member');
    if (entry.membership === 'join' || entry.membership === 'invite') {
      throw new MatrixError('M_UNKNOWN', 'User is in room and cannot forget it; leave first');
    }
    await this.storage.rooms.setForgotten(roomId, requester.userId);
    this.cache.setUserRoom(requester.userId, roomId, { ...entry, forgotten: true });
  }

  // ---- events ----

  /** Sends a message event; a retry with the same transaction id returns the first event id. */
  async send(requester: Requester, roomId: string, type: string, txnId: string, content: JsonObject): Promise<string> {
    if (type === 'm.room.redaction') {
      throw new MatrixError('M_BAD_JSON', 'Redactions are sent with PUT /rooms/{roomId}/redact/{eventId}/{txnId}');
    }
    const scope = txnScope('send', roomId, type);
    return this.once(requester, scope, txnId, (checkpoint) => this.sendNow(requester, roomId, type, content, { deviceId: requester.deviceId, scope, txnId }, checkpoint));
  }

  /**
   * Sends a message for the server itself (the bridge posting a webhook or a feed item): the same
   * checks and limits, without a transaction id, since nothing retries it; so no lookup of one.
   */
  async sendAsServer(requester: Requester, roomId: string, type: string, content: JsonObject): Promise<string> {
    if (type === 'm.room.redaction') throw new MatrixError('M_BAD_JSON', 'Redactions are sent with redact()');
    return this.sendNow(requester, roomId, type, content, undefined, 0);
  }

  private async sendNow(requester: Requester, roomId: string, type: string, content: JsonObject, txn: EventDraft['txn'], checkpoint: number): Promise<string> {
    await this.limiters.checkMessage(requester.userId);
    await this.reader.roomOrForbidden(roomId, requester.userId);
    const [event] = await this.writer.submit({
      roomId,
      prepare: () => [{ type, sender: requester.userId, content, txn }],
      txn: txn && { sender: requester.userId, ...txn, checkpoint },
    });
    return event!.eventId;
  }

  /**
   * Runs a request with a transaction id once: a retry gets the first answer's event id, also
   * while the first is still in flight. A transaction id names one request path (endpoint, room,
   * target) of one device, as in the spec.
   */
  private async once(requester: Requester, scope: string, txnId: string, work: (checkpoint: number) => Promise<string>): Promise<string> {
    const txn = { sender: requester.userId, deviceId: requester.deviceId, scope, txnId };
    const key = txnKeyText(txn);
    const inflight = this.inflightTxns.get(key);
    if (inflight) return inflight;
    const attempt = (async () => {
      // Nothing is looked up before the write: the event is built and written as if new, and a
      // retry of an answered request is found by the write itself (the transaction id is unique
      // in the events table; the writer answers it with the first event, see EventWriter). A
      // lookup before every send cost a query (on PostgreSQL a round trip) for the rare retry.
      const checkpoint = this.writer.retryCheckpoint();
      try {
        return await work(checkpoint);
      } catch (err) {
        // Refused now (the user has left, is rate limited, the auth rules say no): a retry of a
        // request that was answered still gets its first answer.
        const previous = await this.txnLookups.find(txn).catch(() => undefined);
        if (previous) return previous.event_id;
        throw err;
      }
    })();
    this.inflightTxns.set(key, attempt);
    try {
      return await attempt;
    } finally {
      this.inflightTxns.delete(key);
    }
  }

  /** Sets a state event; setting exactly what is already there changes nothing, as in Synapse. */
  async setState(requester: Requester, roomId: string, type: string, stateKey: string, content: JsonObject): Promise<string> {
    const room = await this.reader.roomOrForbidden(roomId, requester.userId);
    const current = room.get(type, stateKey);
    if (current && current.sender === requester.userId && isDeepStrictEqual(current.content, content) && room.isJoined(requester.userId)) {
      return current.eventId;
    }
    if (type === 'm.room.canonical_alias') {
      // Checked and written under the room's alias lock, so an alias deleted meanwhile cannot
      // slip into the event between the check and the write.
      return this.withAliasLock(roomId, async () => {
        await this.checkCanonicalAliases(roomId, content);
        await this.limiters.checkMessage(requester.userId);
        const [event] = await this.writer.submit({ roomId, prepare: () => [{ type, stateKey, sender: requester.userId, content }] });
        return event!.eventId;
      });
    }
    if (type === 'm.room.member') {
      assertUserId(stateKey);
      const membership = content.membership;
      if (membership === 'invite' || membership === 'join') await this.profileOfExistingUser(stateKey);
    }
    await this.limiters.checkMessage(requester.userId);
    const [event] = await this.writer.submit({
      roomId,
      prepare: () => [{ type, stateKey, sender: requester.userId, content }],
    });
    return event!.eventId;
  }

  async redact(requester: Requester, roomId: string, eventId: string, txnId: string, reason: string | undefined): Promise<string> {
    const scope = txnScope('redact', roomId, eventId);
    return this.once(requester, scope, txnId, async (checkpoint) => {
      const room = await this.reader.roomOrForbidden(roomId, requester.userId);
      const target = await this.reader.getEvent(eventId);
      if (!room.isJoined(requester.userId)) throw notInRoom(requester.userId, roomId);
      if (!target) throw new MatrixError('M_NOT_FOUND', 'Event not found');
      // An event of another room is a mistake of the request, not a missing event (Synapse: 400).
      if (target.roomId !== roomId) throw new MatrixError('M_INVALID_PARAM', 'Cannot redact an event of another room', { status: 400 });
      const [event] = await this.writer.submit({
        roomId,
        prepare: (current) => {
          const levels = effectivePowerLevels(current.lookup, current.version);
          if (!canRedact(levels, requester.userId, target.sender)) {
            throw new MatrixError('M_FORBIDDEN', 'You don\u2019t have permission to redact events');
          }
          const draft: EventDraft = {
            type: 'm.room.redaction',
            sender: requester.userId,
            content: reason === undefined ? {} : { reason },
            redaction: { eventId, redactedContent: redactedContent(target.type, target.content, current.roomVersion) },
            txn: { deviceId: requester.deviceId, scope, txnId },
          };
          return [draft];
        },
        txn: { sender: requester.userId, deviceId: requester.deviceId, scope, txnId, checkpoint },
      });
      return event!.eventId;
    });
  }

  // ---- upgrades ----

  /**
   * `POST /rooms/{roomId}/upgrade`: a new room of `newVersion` with the old one's state copied (name,
   * topic, avatar, join rules, history visibility, guest access, encryption, server ACL, power
   * levels), a `predecessor` in its create event naming the old room and its tombstone (which
   * points at the new one, and so is sent first, the new room's id chosen beforehand; a v12 room's
   * id comes from its create event, so there the tombstone follows and the predecessor has no
   * `event_id`); the directory lists the new room instead of the old; the old room's power levels
   * are raised so ordinary members can no longer talk or invite there, and this server's aliases
   * move over. As Synapse does it.
   */
  async upgradeRoom(requester: Requester, roomId: string, newVersion: string): Promise<string> {
    if (!SUPPORTED_ROOM_VERSIONS.includes(newVersion)) {
      throw new MatrixError('M_UNSUPPORTED_ROOM_VERSION', `Your homeserver does not support room version ${newVersion}`, { status: 400 });
    }
    // A room this server does not know is 404, as in Synapse; one it knows but the user is not in, 403.
    const room = await this.cache.room(roomId);
    if (!room) throw new MatrixError('M_NOT_FOUND', `Unknown room ${roomId}`);
    if (!room.isJoined(requester.userId)) throw notInRoom(requester.userId, roomId);
    const levels = effectivePowerLevels(room.lookup, room.version);
    if (userPowerLevel(levels, requester.userId) < requiredPowerForEvent(levels, 'm.room.tombstone', true)) {
      throw new MatrixError('M_FORBIDDEN', 'You do not have the power to upgrade this room');
    }
    if (room.get('m.room.tombstone')?.content.replacement_room !== undefined) {
      throw new MatrixError('M_FORBIDDEN', 'This room has already been replaced');
    }
    const initialState: NonNullable<CreateRoomRequest['initial_state']> = [];
    for (const type of UPGRADE_COPIED_STATE) {
      const event = room.get(type, '');
      if (event && Object.keys(event.content).length > 0) initialState.push({ type, state_key: '', content: event.content });
    }
    const create = room.get('m.room.create')?.content ?? {};
    const predecessor: JsonObject = { room_id: roomId };
    const creationContent: JsonObject = { predecessor };
    for (const key of ['m.federate', 'type'] as const) if (create[key] !== undefined) creationContent[key] = create[key];
    // The old power levels, with the upgrader able to write the copied state. A v12 room's
    // creators are no entry of `users` (their power is the create event's).
    const oldLevels = room.get('m.room.power_levels')?.content ?? {};
    const users: JsonObject = { ...((oldLevels.users as JsonObject | undefined) ?? {}) };
    if (isPrivilegedCreatorVersion(newVersion)) delete users[requester.userId];
    else users[requester.userId] = Math.max(Number(users[requester.userId] ?? 0), 100);
    const wasPublished = (await this.storage.rooms.getRoom(roomId))?.is_public === 1;
    const request: CreateRoomRequest = {
      room_version: newVersion,
      // As Synapse: the copied state overrides the preset, whose one remainder is guest access
      // (can_join) when the old room had no m.room.guest_access.
      preset: 'private_chat',
      visibility: wasPublished ? 'public' : 'private',
      creation_content: creationContent,
      initial_state: initialState,
      power_level_content_override: { ...oldLevels, users },
    };
    const tombstone = (replacement: string) => ({ body: 'This room has been replaced', replacement_room: replacement });
    let replacementId: string;
    if (knownRoomVersion(newVersion).roomIdFromCreateEvent) {
      // A v12 room's id is the hash of its create event, so the tombstone can only follow it (the
      // predecessor's `event_id` is optional since Matrix 1.16).
      replacementId = await this.createRoom(requester, request);
      await this.setState(requester, roomId, 'm.room.tombstone', '', tombstone(replacementId));
    } else {
      // As Synapse: the predecessor names the tombstone, which names the new room; so the new
      // room's id is chosen first, the tombstone sent, then the room made with that id.
      replacementId = newRoomId(this.config.server_name);
      predecessor.event_id = await this.setState(requester, roomId, 'm.room.tombstone', '', tombstone(replacementId));
      try {
        await this.createRoom(requester, request, replacementId);
      } catch (err) {
        // No room came of it: an empty tombstone takes the pointer back, so the upgrade can be retried.
        await this.setState(requester, roomId, 'm.room.tombstone', '', {}).catch(() => undefined);
        throw err;
      }
    }
    // The old room's bans hold in the new one (as Synapse), a batch at a time; one the upgrader
    // may not write is left out.
    const bans = [...room.stateEvents()].filter((e) => e.type === 'm.room.member' && e.stateKey && e.content.membership === 'ban');
    for (let i = 0; i < bans.length; i += UPGRADE_BAN_BATCH) {
      const batch = bans.slice(i, i + UPGRADE_BAN_BATCH).map((e) => memberDraft(requester.userId, e.stateKey!, { membership: 'ban' }, typeof e.content.reason === 'string' ? e.content.reason : undefined));
      await this.writer.submit({ roomId: replacementId, prepare: () => batch }).catch(() => undefined);
    }
    // The directory lists the new room in place of the old one.
    if (wasPublished) await this.storage.rooms.setRoomPublic(roomId, false);
    // Ordinary members can no longer talk or invite in the old room.
    const restricted = Math.max(50, Number(oldLevels.users_default ?? 0) + 1);
    const current = room.get('m.room.power_levels')?.content;
    if (current && (Number(current.events_default ?? 0) < restricted || Number(current.invite ?? 0) < restricted)) {
      await this.setState(requester, roomId, 'm.room.power_levels', '', { ...current, events_default: restricted, invite: restricted }).catch(() => undefined);
    }
    // This server's aliases of the old room now lead to the new one.
    for (const alias of await this.storage.rooms.aliasesOfRoom(roomId)) {
      await this.withAliasLock(roomId, async () => {
        await this.storage.rooms.deleteAlias(alias);
        await this.storage.rooms.insertAlias(alias, replacementId, requester.userId);
      });
    }
    const canonical = room.get('m.room.canonical_alias')?.content;
    if (canonical && Object.keys(canonical).length > 0) {
      await this.setState(requester, replacementId, 'm.room.canonical_alias', '', canonical).catch(() => undefined);
      await this.setState(requester, roomId, 'm.room.canonical_alias', '', {}).catch(() => undefined);
    }
    return replacementId;
  }

  // ---- the room directory ----

  /**
   * A page of the room directory: this server's published rooms, or (`server`) another server's,
   * asked over federation. With a search term, only rooms whose name, topic or alias contain it.
   */
  async publicRooms(query: PublicRoomsQuery & { server?: string | undefined } = {}): Promise<JsonObject> {
    if (query.server !== undefined && query.server !== this.config.server_name) {
      if (!this.remote) throw new MatrixError('M_FORBIDDEN', 'This server does not federate', { status: 403 });
      return this.remote.publicRooms(query.server, query);
    }
    const pageSize = Math.min(Math.max(query.limit ?? 100, 1), 100);
    const term = query.searchTerm?.trim().toLowerCase() || undefined;
    // Tokens: `r<id>` pages on from after that room, `b<id>` back from before it (ids in order).
    const backwards = query.since?.startsWith('b') === true;
    let cursor = query.since !== undefined && /^[rb]/.test(query.since) ? query.since.slice(1) : '';
    if (backwards && cursor === '') return { chunk: [], total_room_count_estimate: await this.storage.rooms.countPublicRooms() };
    const page = (from: string, limit: number) => (backwards ? this.storage.rooms.publicRoomIdsBefore(from, limit) : this.storage.rooms.publicRoomIds(from, limit));
    const chunk: JsonObject[] = [];
    let firstScanned: string | undefined;
    let more = false;
    // A search reads on until the page is full, but no further than this many rooms a request.
    for (let scanned = 0; chunk.length < pageSize && scanned < DIRECTORY_SCAN_LIMIT; ) {
      const ids = await page(cursor, pageSize + 1);
      for (const roomId of ids) {
        if (chunk.length === pageSize) {
          more = true;
          break;
        }
        cursor = roomId;
        firstScanned ??= roomId;
        scanned += 1;
        const entry = await this.directoryEntry(roomId);
        if (entry && (term === undefined || matchesSearch(entry, term))) chunk.push(entry);
      }
      if (ids.length <= pageSize && !more) break;
      if (more) break;
    }
    if (!more && chunk.length === pageSize) more = (await page(cursor, 1)).length > 0;
    const tokens: JsonObject = {};
    if (backwards) {
      chunk.reverse();
      if (more) tokens.prev_batch = `b${cursor}`;
      if (firstScanned !== undefined) tokens.next_batch = `r${firstScanned}`;
    } else {
      if (more) tokens.next_batch = `r${cursor}`;
      if (query.since !== undefined && firstScanned !== undefined) tokens.prev_batch = `b${firstScanned}`;
    }
    return { chunk, ...tokens, total_room_count_estimate: await this.storage.rooms.countPublicRooms() };
  }

  private async directoryEntry(roomId: string): Promise<JsonObject | undefined> {
    const room = await this.cache.room(roomId);
    if (!room) return undefined;
    const text = (type: string, key: string): string | undefined => {
      const value = room.get(type)?.content[key];
      return typeof value === 'string' ? value : undefined;
    };
    const entry: JsonObject = {
      room_id: roomId,
      num_joined_members: room.joinedUsers().size,
      world_readable: room.historyVisibility() === 'world_readable',
      guest_can_join: room.get('m.room.guest_access')?.content.guest_access === 'can_join',
      join_rule: text('m.room.join_rules', 'join_rule') ?? 'invite',
    };
    const roomType = room.get('m.room.create')?.content.type;
    if (typeof roomType === 'string') entry.room_type = roomType;
    for (const [key, type, field] of [['name', 'm.room.name', 'name'], ['topic', 'm.room.topic', 'topic'], ['avatar_url', 'm.room.avatar', 'url'], ['canonical_alias', 'm.room.canonical_alias', 'alias']] as const) {
      const value = text(type, field);
      if (value !== undefined) entry[key] = value;
    }
    return entry;
  }

  /** `GET /directory/list/room/{roomId}`: whether the room is published here. */
  async directoryVisibility(roomId: string): Promise<'public' | 'private'> {
    const row = await this.storage.rooms.getRoom(roomId);
    if (!row) throw new MatrixError('M_NOT_FOUND', 'Unknown room');
    return row.is_public === 1 ? 'public' : 'private';
  }

  /**
   * `PUT /directory/list/room/{roomId}`: publishes the room here, or takes it out. As Synapse asks:
   * a member with the power to change the room's canonical alias, or a server admin.
   */
  async setDirectoryVisibility(requester: Requester, roomId: string, visibility: 'public' | 'private', isServerAdmin: boolean): Promise<void> {
    const room = await this.cache.room(roomId);
    if (!room) throw new MatrixError('M_NOT_FOUND', 'Unknown room');
    if (!isServerAdmin) {
      const levels = effectivePowerLevels(room.lookup, room.version);
      if (!room.isJoined(requester.userId) || userPowerLevel(levels, requester.userId) < requiredPowerForEvent(levels, 'm.room.canonical_alias', true)) {
        throw new MatrixError('M_FORBIDDEN', 'You are not allowed to change the room\u2019s visibility in the directory');
      }
    }
    await this.storage.rooms.setRoomPublic(roomId, visibility === 'public');
  }

  // ---- aliases ----

  async resolveAlias(alias: string): Promise<string> {
    return (await this.lookupAlias(alias)).roomId;
  }

  /**
   * An alias's room and the servers to join it through (another server's aliases are asked there;
   * an unknown one of an appservice's namespace is asked of the appservice, which may create it).
   */
  async lookupAlias(alias: string): Promise<{ roomId: string; servers: string[] }> {
    assertRoomAlias(alias);
    if (serverOf(alias) !== this.config.server_name && this.remote) return this.remote.resolveAlias(alias);
    let row = await this.storage.rooms.getAlias(alias);
    if (!row && (await this.aliasNamespaces?.askAboutAlias(alias))) row = await this.storage.rooms.getAlias(alias);
    if (!row) throw new MatrixError('M_NOT_FOUND', `Room alias ${alias} not found`);
    const room = await this.cache.room(row.room_id);
    const servers = [this.config.server_name, ...(room ? [...room.joinedServers()].filter((server) => server !== this.config.server_name) : [])];
    return { roomId: row.room_id, servers };
  }

  async createAlias(requester: Requester, alias: string, roomId: string): Promise<void> {
    assertRoomAlias(alias);
    if (serverOf(alias) !== this.config.server_name) {
      throw new MatrixError('M_INVALID_PARAM', 'Room alias must be local');
    }
    this.aliasNamespaces?.assertMayClaimAlias(requester, alias);
    const room = await this.reader.roomOrForbidden(roomId, requester.userId);
    if (!room.isJoined(requester.userId)) throw notInRoom(requester.userId, roomId);
    if (!(await this.storage.rooms.insertAlias(alias, roomId, requester.userId))) {
      throw new MatrixError('M_UNKNOWN', `Room alias ${alias} already exists`, { status: 409 });
    }
  }

  async deleteAlias(requester: Requester, alias: string, isServerAdmin: boolean): Promise<void> {
    assertRoomAlias(alias);
    const row = await this.storage.rooms.getAlias(alias);
    if (!row) throw new MatrixError('M_NOT_FOUND', `Room alias ${alias} not found`);
    if (row.creator !== requester.userId && !isServerAdmin) {
      const room = await this.cache.room(row.room_id);
      const levels = room ? effectivePowerLevels(room.lookup, room.version) : undefined;
      const allowed =
        room !== undefined &&
        levels !== undefined &&
        room.isJoined(requester.userId) &&
        userPowerLevel(levels, requester.userId) >= requiredPowerForEvent(levels, 'm.room.canonical_alias', true);
      if (!allowed) throw new MatrixError('M_FORBIDDEN', 'You don\u2019t have permission to delete the alias.');
    }
    await this.withAliasLock(row.room_id, async () => {
      await this.storage.rooms.deleteAlias(alias);
      await this.dropFromCanonicalAlias(requester, row.room_id, alias);
    });
  }

  /** Runs alias changes of one room one at a time (deleting aliases, setting the canonical alias). */
  private async withAliasLock<T>(roomId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.aliasLocks.get(roomId) ?? Promise.resolve();
    const result = previous.then(work, work);
    const done = result.then(
      () => undefined,
      () => undefined,
    );
    this.aliasLocks.set(roomId, done);
    try {
      return await result;
    } finally {
      if (this.aliasLocks.get(roomId) === done) this.aliasLocks.delete(roomId);
    }
  }

  /**
   * Takes a deleted alias out of the room's m.room.canonical_alias, as Synapse does, so the room
   * stops advertising it. Written as the caller; when they may not change that event (a server
   * admin outside the room, an alias creator without power) it stays, as in Synapse.
   */
  private async dropFromCanonicalAlias(requester: Requester, roomId: string, alias: string): Promise<void> {
    if (!(await this.cache.room(roomId))) return;
    try {
      await this.writer.submit({
        roomId,
        // Read at write time, so a change queued just before is not overwritten with stale content.
        prepare: (room) => {
          const content = room.get('m.room.canonical_alias')?.content;
          if (!content) return [];
          const alt = Array.isArray(content.alt_aliases) ? content.alt_aliases : [];
          if (content.alias !== alias && !alt.includes(alias)) return [];
          const updated: JsonObject = { ...content, alt_aliases: alt.filter((a) => a !== alias) };
          if (content.alias === alias) delete updated.alias;
          if ((updated.alt_aliases as unknown[]).length === 0) delete updated.alt_aliases;
          return [{ type: 'm.room.canonical_alias', stateKey: '', sender: requester.userId, content: updated }];
        },
      });
    } catch (err) {
      if (!(err instanceof MatrixError && err.errcode === 'M_FORBIDDEN')) throw err;
    }
  }

  async aliasesOf(requester: Requester, roomId: string): Promise<string[]> {
    await this.reader.roomForMember(roomId, requester.userId);
    return this.storage.rooms.aliasesOfRoom(roomId);
  }

  // ---- helpers ----

  async resolveRoom(roomIdOrAlias: string): Promise<string> {
    if (isRoomId(roomIdOrAlias)) return roomIdOrAlias;
    if (isRoomAlias(roomIdOrAlias)) return this.resolveAlias(roomIdOrAlias);
    throw new MatrixError('M_INVALID_PARAM', `${roomIdOrAlias.slice(0, 100)} was not legal room ID or room alias`);
  }

  private async checkCanonicalAliases(roomId: string, content: JsonObject): Promise<void> {
    const aliases = [content.alias, ...(Array.isArray(content.alt_aliases) ? content.alt_aliases : [])].filter((a) => a !== undefined && a !== null);
    for (const alias of aliases) {
      if (typeof alias !== 'string' || !isRoomAlias(alias)) throw new MatrixError('M_INVALID_PARAM', 'Invalid alias in m.room.canonical_alias');
      const row = await this.storage.rooms.getAlias(alias);
      if (!row || row.room_id !== roomId) {
        throw new MatrixError('M_BAD_ALIAS', `Room alias ${alias} does not point to the room`);
      }
    }
  }

  /** The displayname and avatar that go into a member event. */
  async profileOf(userId: string): Promise<JsonObject> {
    const user = await this.storage.users.get(userId);
    const profile: JsonObject = {};
    if (user?.displayname) profile.displayname = user.displayname;
    if (user?.avatar_url) profile.avatar_url = user.avatar_url;
    return profile;
  }

  private async profileOfExistingUser(userId: string): Promise<JsonObject> {
    if (serverOf(userId) !== this.config.server_name) {
      if (this.remote) return {};
      throw new MatrixError('M_FORBIDDEN', 'This server does not federate: only local users can be invited');
    }
    const user = await this.storage.users.get(userId);
    if (!user || user.deactivated === 1) throw new MatrixError('M_NOT_FOUND', `Unknown user ${userId}`);
    return this.profileOf(userId);
  }

  /** Takes a deactivated user out of every room they are in or invited to, as Synapse does. */
  async leaveAllRooms(userId: string): Promise<void> {
    const rooms = await this.cache.roomsOf(userId);
    for (const [roomId, entry] of rooms) {
      if (entry.membership !== 'join' && entry.membership !== 'invite' && entry.membership !== 'knock') continue;
      await this.writer
        .submit({
          roomId,
          prepare: (room) => (['join', 'invite', 'knock'].includes(room.membership(userId)) ? [memberDraft(userId, userId, { membership: 'leave' })] : []),
        })
        .catch(() => undefined); // one room refusing must not keep the user in the others
    }
  }

  /**
   * Takes accounts deactivated from outside the server (the CLI works on the database directly,
   * and cannot write room events beside a running server) out of their rooms. Returns them.
   */
  async leaveRoomsOfDeactivatedUsers(): Promise<string[]> {
    const users = await this.storage.rooms.deactivatedUsersInRooms();
    for (const userId of users) await this.leaveAllRooms(userId);
    return users;
  }

  /** Writes a new member event in every room the user is joined to (after a profile change). */
  async refreshMemberEvents(userId: string): Promise<void> {
    const profile = await this.profileOf(userId);
    const rooms = await this.cache.roomsOf(userId);
    for (const [roomId, entry] of rooms) {
      if (entry.membership !== 'join') continue;
      await this.writer.submit({
        roomId,
        prepare: (room: RoomSnapshot) => {
          if (!room.isJoined(userId)) return [];
          const previous = room.get('m.room.member', userId)?.content ?? {};
          const content: JsonObject = { ...previous, membership: 'join' };
          delete content.displayname;
          delete content.avatar_url;
          delete content.reason;
          const next = { ...content, ...profile };
          // The same join again is no change (as Synapse: no event, no wake-up for the room).
          if (isDeepStrictEqual(next, previous)) return [];
          return [memberDraft(userId, userId, next)];
        },
      }).catch(() => undefined); // one room refusing must not stop the others
    }
  }
}

/** Throws the auth rules' refusal for a draft, before the caller looks at anything else. */
function assertAllowed(room: RoomSnapshot, draft: EventDraft): void {
  const result = checkEventAuth(
    { type: draft.type, ...(draft.stateKey !== undefined ? { state_key: draft.stateKey } : {}), sender: draft.sender, content: draft.content },
    room.lookup,
    room.version,
  );
  if (!result.allowed) throw new MatrixError('M_FORBIDDEN', result.reason);
}

/** What the invitee's server shows of the room with the invite: its stripped state and the inviter. */
function inviteStateOf(room: RoomSnapshot, inviter: string): JsonObject[] {
  const inviterEvent = room.get('m.room.member', inviter);
  return [...room.strippedState(), ...(inviterEvent ? [toStrippedState(inviterEvent)] : [])];
}

/** Keys of a join's content that the server sets, never the client's request. */
// `kind` says a guest joined (guests are made to leave when guest access ends): the server's to set.
const SERVER_SET_JOIN_KEYS = new Set(['membership', 'join_authorised_via_users_server', 'third_party_signed', 'reason', 'is_direct', 'kind']);

/** A guest's membership says so (`kind: "guest"`), as Synapse writes it. */
function guestKind(requester: Requester): JsonObject {
  return requester.isGuest ? { kind: 'guest' } : {};
}

/** What of a join request's body goes into the join's content (the event's own size limit bounds it). */
function clientJoinContent(body: JsonObject): JsonObject {
  return Object.fromEntries(Object.entries(body).filter(([key]) => !SERVER_SET_JOIN_KEYS.has(key)));
}

function memberDraft(sender: string, target: string, content: JsonObject, reason?: string): EventDraft {
  return { type: 'm.room.member', stateKey: target, sender, content: reason === undefined ? content : { ...content, reason } };
}

/** Rooms read at most for one directory request that searches. */
const DIRECTORY_SCAN_LIMIT = 2000;

function matchesSearch(entry: JsonObject, term: string): boolean {
  return ['name', 'topic', 'canonical_alias'].some((key) => typeof entry[key] === 'string' && (entry[key] as string).toLowerCase().includes(term));
}

/** State a room upgrade copies into the new room (power levels go as the creation's override). */
/** Bans an upgrade copies into the new room in one write. */
const UPGRADE_BAN_BATCH = 100;

const UPGRADE_COPIED_STATE = [
  'm.room.server_acl',
  'm.room.encryption',
  'm.room.name',
  'm.room.avatar',
  'm.room.topic',
  'm.room.guest_access',
  'm.room.history_visibility',
  'm.room.join_rules',
] as const;

function isPrivilegedCreatorVersion(version: string): boolean {
  return roomVersion(version)?.privilegedCreators === true;
}

/**
 * What a transaction id is scoped to, as stored with the event: the endpoint and its path. Joined by
 * U+001F (unit separator), which PostgreSQL stores, unlike U+0000 (used before; such rows are
 * translated by migrate-to-postgres).
 */
function txnScope(endpoint: 'send' | 'redact', roomId: string, target: string): string {
  return `${endpoint}\u001f${roomId}\u001f${target}`;
}
