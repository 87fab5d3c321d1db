/**
 * Who may see which events (the spec's history visibility rules), as pure functions over a user's
 * membership history in a room.
 */
import type { StoredEvent } from './events.js';

export interface MembershipChange {
  stream: number;
  membership: string;
}

export interface VisibilityContext {
  userId: string;
  /** The room's `m.room.history_visibility` now ("shared" when unset); each event is judged by its own. */
  historyVisibility: string;
  /** The user's membership now. */
  currentMembership: string;
  /** The user's membership events in the room, oldest first. */
  history: readonly MembershipChange[];
}

/** The user's membership right after the event at `stream` (their own change included). */
export function membershipAt(history: readonly MembershipChange[], stream: number): string {
  let membership = 'leave';
  for (const change of history) {
    if (change.stream > stream) break;
    membership = change.membership;
  }
  return membership;
}

/**
 * Whether the user may see the event, judged by the history visibility in force when it was sent
 * (making a room world-readable later does not publish what was said under `joined`).
 */
export function canSeeEvent(event: StoredEvent, context: VisibilityContext): boolean {
  // A change of history visibility is seen under the rule before it or the one it sets (the spec,
  // and Synapse): who may read from now on sees what made the room so.
  if (event.type === 'm.room.history_visibility' && event.stateKey === '' && typeof event.content.history_visibility === 'string') {
    if (visibleUnder(event.content.history_visibility, event, context)) return true;
  }
  return visibleUnder(event.historyVisibility, event, context);
}

function visibleUnder(visibility: string, event: StoredEvent, context: VisibilityContext): boolean {
  if (visibility === 'world_readable') return true;
  // Backfilled history sits below zero; it is judged where the gap it filled lay.
  let membership = membershipAt(context.history, event.backfilledAt ?? event.stream);
  if (event.type === 'm.room.member' && event.stateKey === context.userId) {
    // The user's own membership change: the one that ends a membership or an invite (a leave, a
    // kick, a rejected or withdrawn invite, a ban) is seen, as in Synapse, or clients never learn
    // they are out; otherwise it is judged by the more joined of before and after, so a ban long
    // after leaving is not.
    const before = typeof event.prevContent?.membership === 'string' ? event.prevContent.membership : 'leave';
    if (before === 'join' || before === 'invite' || before === 'knock') return true;
    membership = moreJoined(before, membership);
  }
  if (membership === 'join') return true;
  if (visibility === 'shared' && context.currentMembership === 'join') return true;
  return visibility === 'invited' && membership === 'invite';
}

const MEMBERSHIP_PRIORITY = ['join', 'invite', 'knock', 'leave', 'ban'];

function moreJoined(a: string, b: string): string {
  const rank = (m: string): number => {
    const index = MEMBERSHIP_PRIORITY.indexOf(m);
    return index < 0 ? MEMBERSHIP_PRIORITY.indexOf('leave') : index;
  };
  return rank(a) <= rank(b) ? a : b;
}
