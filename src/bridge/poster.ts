/** What the bridge's services need from the bridge user: to post as it, and to know where it is. */
import type { JsonObject } from '../rooms/events.js';

export interface BridgePoster {
  readonly userId: string;
  /** True while the bridge is joined to the room; webhooks and feeds act only there. */
  isActiveIn(roomId: string): Promise<boolean>;
  /** Sends an m.room.message as the bridge; resolves with the event id once stored. */
  post(roomId: string, content: JsonObject): Promise<string>;
}
