/**
 * Who may put what in one device's to-device inbox. Storage per device is bounded (`perDevice`),
 * and shared so that no sender can keep another's messages (encryption keys) out:
 *
 * - one sender holds at most `perSender` waiting messages for a device; more are refused;
 * - when the device is full, room is made by dropping the oldest message of whoever holds the
 *   most, and only if they hold more than the newcomer. "Who" is first the holder (a local
 *   user, or all users of one remote server together, since another server can make up as many
 *   user ids as it likes), then the sender within that holder.
 *
 * So a holder (and within it a sender) that keeps at most its fair share (the device's bound over
 * the number of holders) never loses a message, and a newcomer always gets in unless it already
 * holds as much as anyone. Pure: the counts come from storage, the caller writes the outcome.
 */

export interface InboxLimits {
  /** Waiting messages one sender may have for one device. */
  perSender: number;
  /** Waiting messages one device may hold in all. */
  perDevice: number;
}

/** Why a message was not admitted. */
export type Refusal = 'sender_full' | 'device_full';

export class InboxAdmission {
  private readonly bySender: Map<string, number>;
  private readonly byHolder = new Map<string, number>();
  private total = 0;
  /** Messages to drop to make room, oldest first, by sender. */
  readonly evictions = new Map<string, number>();

  /**
   * `held`: waiting messages per sender for this device. Every message admitted must come from
   * one `sender` (one request, one EDU), so what is evicted is always already stored.
   */
  constructor(
    held: ReadonlyMap<string, number>,
    private readonly sender: string,
    private readonly holderOf: (sender: string) => string,
    private readonly limits: InboxLimits,
  ) {
    this.bySender = new Map(held);
    for (const [who, n] of held) {
      this.total += n;
      const holder = holderOf(who);
      this.byHolder.set(holder, (this.byHolder.get(holder) ?? 0) + n);
    }
  }

  /** Admits one more message from the sender, or says why not. */
  admit(): Refusal | undefined {
    const own = this.bySender.get(this.sender) ?? 0;
    if (own >= this.limits.perSender) return 'sender_full';
    if (this.total >= this.limits.perDevice) {
      const victim = this.victim();
      if (victim === undefined) return 'device_full';
      this.take(victim, -1);
      this.evictions.set(victim, (this.evictions.get(victim) ?? 0) + 1);
    }
    this.take(this.sender, 1);
    return undefined;
  }

  /** The sender whose oldest message makes room, if anyone holds more than the newcomer. */
  private victim(): string | undefined {
    const holder = this.holderOf(this.sender);
    const ownHolder = this.byHolder.get(holder) ?? 0;
    let top: string | undefined;
    let topCount = 0;
    for (const [candidate, n] of this.byHolder) {
      // On a tie, a remote server's messages go before a local user's.
      if (n > topCount || (n === topCount && top !== undefined && isLocalHolder(top) && !isLocalHolder(candidate))) {
        top = candidate;
        topCount = n;
      }
    }
    if (top !== undefined && top !== holder && topCount > ownHolder) return this.largestSender(top, undefined);
    // The newcomer's holder holds the most: make room within it, from a sender holding more.
    return this.largestSender(holder, this.bySender.get(this.sender) ?? 0);
  }

  private largestSender(holder: string, moreThan: number | undefined): string | undefined {
    let best: string | undefined;
    let bestCount = moreThan ?? 0;
    for (const [who, n] of this.bySender) {
      if (n > bestCount && this.holderOf(who) === holder) {
        best = who;
        bestCount = n;
      }
    }
    return best;
  }

  private take(sender: string, delta: number): void {
    this.bySender.set(sender, (this.bySender.get(sender) ?? 0) + delta);
    const holder = this.holderOf(sender);
    this.byHolder.set(holder, (this.byHolder.get(holder) ?? 0) + delta);
    this.total += delta;
  }
}

/** Local holders are user ids; a remote holder is a server name. */
function isLocalHolder(holder: string): boolean {
  return holder.startsWith('@');
}
