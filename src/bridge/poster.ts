/** What the bridge's services need from the bridge user: to post as it, and to know where it is. */
import type { JsonObject } from '../rooms/events.js';

export interface BridgePoster {
  readonly userId: string;
  /** True while the bridge is joined to the room; webhooks and feeds act only there. */
  isActiveIn(roomId: string): Promise<boolean>;
  /**
   * Sends an m.room.message as the bridge; resolves with the event id once stored. With a
   * `txnId`, posting the same again (after a crash, or by the process that took over) gives the
   * first event instead of a second one.
   */
  post(roomId: string, content: JsonObject, txnId?: string): Promise<string>;
}
