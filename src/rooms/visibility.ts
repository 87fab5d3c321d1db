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
  const visibility = event.historyVisibility;
  if (visibility === 'world_readable') return true;
  // A user always sees what happened to their own membership (the kick, the ban, the invite).
  if (event.type === 'm.room.member' && event.stateKey === context.userId) return true;
  const membership = membershipAt(context.history, event.stream);
  if (membership === 'join') return true;
  if (visibility === 'shared' && context.currentMembership === 'join') return true;
  return visibility === 'invited' && membership === 'invite';
}
