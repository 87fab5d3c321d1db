/**
 * The bridge's direct-message rooms, recorded in its own `m.direct` account data as clients do, and
 * reused while the other user is still in them.
 */
import type { JsonObject } from '../rooms/events.js';
import type { BridgeHomeserver } from './homeserver.js';

export class DirectMessages {
  /**
   * One lookup-or-create at a time, for all users: two requests for one user must not make two
   * rooms, and `m.direct` is read, changed and written whole, so two users' updates must not
   * interleave either. DM rooms are made rarely; one queue costs nothing.
   */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly homeserver: BridgeHomeserver) {}

  async isDirectRoom(roomId: string): Promise<boolean> {
    const direct = await this.directRooms();
    return Object.values(direct).some((rooms) => Array.isArray(rooms) && rooms.includes(roomId));
  }

  /**
   * A DM room with `userId`: an existing one the user is still joined or invited to, or a new one
   * (encrypted when asked: what the bridge posts there follows the room's encryption).
   */
  roomWith(userId: string, encrypted = false): Promise<string> {
    const next = this.queue.catch(() => undefined).then(() => this.findOrCreate(userId, encrypted));
    this.queue = next;
    return next;
  }

  private async findOrCreate(userId: string, encrypted: boolean): Promise<string> {
    const direct = await this.directRooms();
    const known = Array.isArray(direct[userId]) ? (direct[userId] as unknown[]).filter((id): id is string => typeof id === 'string') : [];
    for (const roomId of [...known].reverse()) {
      const theirs = await this.homeserver.membership(roomId, userId);
      if ((await this.homeserver.membership(roomId, this.homeserver.userId)) === 'join' && (theirs === 'join' || theirs === 'invite')) return roomId;
    }
    const roomId = await this.homeserver.createDirectRoom(userId, encrypted);
    const updated = await this.directRooms();
    const rooms = Array.isArray(updated[userId]) ? (updated[userId] as unknown[]) : [];
    await this.homeserver.setAccountData('m.direct', { ...updated, [userId]: [...rooms, roomId] });
    return roomId;
  }

  private async directRooms(): Promise<JsonObject> {
    return (await this.homeserver.accountData('m.direct')) ?? {};
  }
}
