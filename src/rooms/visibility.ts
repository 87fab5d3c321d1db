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
  /** The room's `m.room.history_visibility` (current value; "shared" when unset). */
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

export function canSeeEvent(event: StoredEvent, context: VisibilityContext): boolean {
  if (context.historyVisibility === 'world_readable') return true;
  // A user always sees what happened to their own membership (the kick, the ban, the invite).
  if (event.type === 'm.room.member' && event.stateKey === context.userId) return true;
  const membership = membershipAt(context.history, event.stream);
  if (membership === 'join') return true;
  if (context.historyVisibility === 'shared' && context.currentMembership === 'join') return true;
  return context.historyVisibility === 'invited' && membership === 'invite';
}
