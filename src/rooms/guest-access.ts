/**
 * Guests in rooms (Synapse's rules; guests are a local concept, not an auth rule):
 * - a guest may join only a room whose `m.room.guest_access` is `can_join` (absent is `forbidden`);
 * - a guest's membership events carry `kind: "guest"`;
 * - when `m.room.guest_access` stops being `can_join`, this server's guests leave the room (they
 *   leave rather than being kicked, so no power level is needed, as Synapse does).
 * Pure: the room service and the commit listener do the writing.
 */
import { MatrixError } from '../core/errors.js';
import type { StoredEvent } from './events.js';
import type { RoomSnapshot } from './room-snapshot.js';

export const GUEST_ACCESS = 'm.room.guest_access';

/** Whether the room's current state lets guests join. */
export function guestCanJoin(room: Pick<RoomSnapshot, 'get'>): boolean {
  return room.get(GUEST_ACCESS)?.content.guest_access === 'can_join';
}

export function assertGuestMayJoin(room: Pick<RoomSnapshot, 'get'>): void {
  if (!guestCanJoin(room)) throw new MatrixError('M_FORBIDDEN', 'Guest access not allowed');
}

/**
 * The local guests who must leave after `events` were committed to `room`: none unless one of
 * them changed `m.room.guest_access` and the room no longer lets guests in; then every member
 * of this server, joined or invited, whose membership says `kind: "guest"`.
 */
export function guestsToRemove(events: readonly StoredEvent[], room: RoomSnapshot, serverName: string): string[] {
  if (!events.some((event) => event.type === GUEST_ACCESS && event.stateKey === '') || guestCanJoin(room)) return [];
  const suffix = `:${serverName}`;
  const guests: string[] = [];
  for (const event of room.stateEvents()) {
    if (event.type !== 'm.room.member' || event.stateKey === undefined || !event.stateKey.endsWith(suffix)) continue;
    const membership = event.content.membership;
    if ((membership === 'join' || membership === 'invite') && event.content.kind === 'guest') guests.push(event.stateKey);
  }
  return guests;
}
