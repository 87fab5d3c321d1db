/**
 * Restricted join rules (room versions 8 and later): a user may join without an invite when they
 * are in one of the rooms the join rule allows, and a member who may invite vouches for the join
 * by being named in it (`join_authorised_via_users_server`, and signed by that member's server).
 * Whoever builds the join (this server for its users, or for another server's in make_join)
 * chooses the member here.
 */
import { MatrixError } from '../core/errors.js';
import { domainOf, effectivePowerLevels, joinRuleOf, userPowerLevel } from './auth-rules.js';
import type { RoomSnapshot } from './room-snapshot.js';

/** At most this many allowed rooms are looked at. */
const MAX_ALLOWED_ROOMS = 50;

/** Whether a join of `userId` needs a member to vouch for it. */
export function needsAuthoriser(room: RoomSnapshot, userId: string): boolean {
  const rule = joinRuleOf(room.lookup);
  if ((rule !== 'restricted' && rule !== 'knock_restricted') || !room.version.restrictedJoins) return false;
  const membership = room.membership(userId);
  return membership !== 'join' && membership !== 'invite';
}

/** The rooms whose members may join (`allow` entries of type `m.room_membership`). */
export function allowedRoomIds(room: RoomSnapshot): string[] {
  const allow = room.get('m.room.join_rules')?.content.allow;
  if (!Array.isArray(allow)) return [];
  return allow
    .flatMap((entry) => {
      if (typeof entry !== 'object' || entry === null) return [];
      const { type, room_id: roomId } = entry as Record<string, unknown>;
      return type === 'm.room_membership' && typeof roomId === 'string' ? [roomId] : [];
    })
    .slice(0, MAX_ALLOWED_ROOMS);
}

/**
 * A member of `serverName` who may invite, to vouch for a join by a user found in an allowed
 * room; the errors Synapse answers when there is none.
 */
export function chooseAuthoriser(room: RoomSnapshot, serverName: string, inAllowedRoom: boolean): string {
  if (!inAllowedRoom) {
    throw new MatrixError('M_UNABLE_TO_AUTHORISE_JOIN', 'You are not in any room this room allows joining from (as far as this server knows)', { status: 400 });
  }
  const levels = effectivePowerLevels(room.lookup, room.version);
  for (const member of room.joinedUsers()) {
    if (domainOf(member) === serverName && userPowerLevel(levels, member) >= levels.invite) return member;
  }
  throw new MatrixError('M_UNABLE_TO_GRANT_JOIN', 'No user on this server may invite to the room', { status: 400 });
}
