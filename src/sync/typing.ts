/**
 * Who is typing where. Typing is short-lived and never stored: it has its own serial, carried in
 * the sync token beside the stream position (a token whose typing serial is ahead of ours, after
 * the clock went back, simply gets every room's current typing list).
 */
import type { RoomCache } from '../rooms/room-cache.js';
import type { Notifier } from './notifier.js';

/** Synapse caps a typing notification at this long; a bot that stops sending it stops "typing". */
export const MAX_TYPING_TIMEOUT_MS = 120_000;

interface RoomTyping {
  serial: number;
  users: Map<string, NodeJS.Timeout>;
}

export class TypingTracker {
  /**
   * Starts from the clock, not 0, so serials keep growing across restarts and a token from before
   * one never looks newer than what happened after it.
   */
  private serialCounter = Date.now();
  private readonly rooms = new Map<string, RoomTyping>();

  constructor(
    private readonly cache: RoomCache,
    private readonly notifier: Notifier,
  ) {}

  get serial(): number {
    return this.serialCounter;
  }

  private readonly listeners: Array<(roomId: string, userId: string, typing: boolean, timeoutMs: number) => void> = [];

  /** Called on every typing notice set (not on expiry): federation sends local users' on. */
  onTyping(listener: (roomId: string, userId: string, typing: boolean, timeoutMs: number) => void): void {
    this.listeners.push(listener);
  }

  setTyping(roomId: string, userId: string, typing: boolean, timeoutMs: number): void {
    for (const listener of this.listeners) listener(roomId, userId, typing, timeoutMs);
    this.apply(roomId, userId, typing, timeoutMs);
  }

  /** A typing notice set through another process (which told the servers and appservices already). */
  applyShared(roomId: string, userId: string, typing: boolean, timeoutMs: number): void {
    this.apply(roomId, userId, typing, timeoutMs);
  }

  private apply(roomId: string, userId: string, typing: boolean, timeoutMs: number): void {
    let room = this.rooms.get(roomId);
    const existing = room?.users.get(userId);
    if (existing) clearTimeout(existing);
    if (!typing) {
      if (!existing || !room) return;
      room.users.delete(userId);
      this.changed(roomId, room);
      return;
    }
    if (!room) {
      room = { serial: 0, users: new Map() };
      this.rooms.set(roomId, room);
    }
    const timer = setTimeout(() => this.apply(roomId, userId, false, 0), Math.min(timeoutMs, MAX_TYPING_TIMEOUT_MS));
    timer.unref();
    room.users.set(userId, timer);
    // Renewing an ongoing notification changes nothing others can see.
    if (!existing) this.changed(roomId, room);
  }

  typingIn(roomId: string): string[] {
    return [...(this.rooms.get(roomId)?.users.keys() ?? [])];
  }

  /** Whether the room's typing list changed after the given serial. */
  changedSince(roomId: string, sinceSerial: number): boolean {
    const room = this.rooms.get(roomId);
    if (sinceSerial > this.serialCounter) return room !== undefined && room.users.size > 0;
    return room !== undefined && room.serial > sinceSerial;
  }

  /** Stops every timer (on shutdown). */
  clear(): void {
    for (const room of this.rooms.values()) for (const timer of room.users.values()) clearTimeout(timer);
    this.rooms.clear();
  }

  private changed(roomId: string, room: RoomTyping): void {
    // The entry stays even when empty, so its serial tells a sync that the list became empty.
    room.serial = ++this.serialCounter;
    const loaded = this.cache.peek(roomId);
    const peekers = [...this.notifier.peekersOf(roomId)];
    if (loaded) this.notifier.notify([...loaded.interestedUsers(), ...peekers]);
    // A room not held in memory just now (a typing notice that timed out long after): load it.
    else void this.cache.room(roomId).then((room) => this.notifier.notify([...(room?.interestedUsers() ?? []), ...peekers]), () => undefined);
  }
}
