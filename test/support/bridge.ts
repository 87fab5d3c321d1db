/** Helpers for tests of the bridge user: inviting and promoting it, and reading what it says. */
import { expect } from 'vitest';
import type { TestHomeserver } from './homeserver.js';
import type { Json, TestClient } from './client.js';

/** Config overrides that enable the bridge, with its other settings merged in. */
export function withBridge(bridge: Record<string, unknown> = {}, rest: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...rest, bridge: { enabled: true, ...bridge } };
}

export function bridgeIdOf(hs: TestHomeserver): string {
  const bridge = hs.app.homeserver.bridge;
  if (!bridge) throw new Error('the bridge is not enabled');
  return bridge.userId;
}

/** A room owned by `owner` with the bridge invited, joined and (unless told not to) made Moderator. */
export async function roomWithBridge(hs: TestHomeserver, owner: TestClient, options: { promote?: boolean; invite?: string[] } = {}): Promise<string> {
  const bridgeId = bridgeIdOf(hs);
  const roomId = await owner.createRoom({ preset: 'private_chat', invite: options.invite ?? [] });
  await owner.invite(roomId, bridgeId);
  await owner.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === bridgeId && event.content.membership === 'join');
  if (options.promote !== false) await promoteBridge(hs, owner, roomId);
  return roomId;
}

export async function promoteBridge(hs: TestHomeserver, owner: TestClient, roomId: string, level = 50): Promise<void> {
  const path = `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`;
  const levels = await owner.ok('GET', path);
  await owner.ok('PUT', path, { ...levels, users: { ...levels.users, [bridgeIdOf(hs)]: level } });
}

/** Sends a command and resolves with the bridge's reply to it (a notice in reply to the command). */
export async function command(hs: TestHomeserver, sender: TestClient, roomId: string, body: string): Promise<Json> {
  const eventId = await sender.send(roomId, { msgtype: 'm.text', body });
  const reply = await sender.waitForEvent(
    roomId,
    (event) => event.sender === bridgeIdOf(hs) && event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === eventId,
  );
  expect(reply.content.msgtype).toBe('m.notice');
  return reply;
}

/** Messages the bridge has sent in `roomId`, as seen by `viewer` so far (after syncing up to now). */
export async function bridgeMessages(hs: TestHomeserver, viewer: TestClient, roomId: string): Promise<Json[]> {
  const marker = await viewer.send(roomId, { msgtype: 'm.text', body: `marker ${Math.random()}` });
  await viewer.waitForEvent(roomId, (event) => event.event_id === marker);
  return viewer.seenIn(roomId).filter((event) => event.sender === bridgeIdOf(hs) && event.type === 'm.room.message');
}

export interface WebhookCredentials {
  url: string;
  path: string;
  /** The signing secret, when the bridge sent one. */
  secret?: string | undefined;
  reply: Json;
}

/**
 * Sends a webhook command as `owner` (default `!bridge webhook <name>`) and reads the URL (and
 * secret) from the bridge's direct message; `previousUrl` skips the message of an earlier URL.
 */
export async function createWebhook(
  hs: TestHomeserver,
  owner: TestClient,
  roomId: string,
  name: string,
  options: { commandText?: string; previousUrl?: string; expectReply?: string } = {},
): Promise<WebhookCredentials> {
  const reply = await command(hs, owner, roomId, options.commandText ?? `!bridge webhook ${name}`);
  expect(reply.content.body).toContain(options.expectReply ?? `Created the webhook "${name}"`);
  expect(reply.content.body).toContain('direct message');
  // The URL is in a DM room the bridge invited the requester to (marked as direct), or reused.
  const direct = await hs.services.accountData.get(bridgeIdOf(hs), undefined, 'm.direct');
  const rooms = direct[owner.userId] as string[];
  const dm = rooms[rooms.length - 1]!;
  if (!hs.services.roomCache.peek(dm)?.isJoined(owner.userId)) {
    const inviteState = await owner.waitForInvite(dm);
    const ownMember = inviteState.find((event) => event.type === 'm.room.member' && event.state_key === owner.userId);
    expect(ownMember?.content.is_direct).toBe(true);
    await owner.join(dm);
  }
  const urlIn = (body: string) => body.split('\n').find((text) => text.startsWith('https://'));
  const message = await owner.waitForEvent(dm, (event) => {
    const body = String(event.content?.body);
    return event.sender === bridgeIdOf(hs) && body.includes(`"${name}"`) && urlIn(body) !== undefined && urlIn(body) !== options.previousUrl;
  });
  const lines = String(message.content.body).split('\n');
  const url = urlIn(String(message.content.body))!;
  expect(url).toMatch(/^https:\/\/matrix\.test\.local\/webhook\/[A-Za-z0-9_-]{43}$/);
  const secretIntro = lines.findIndex((line) => line.startsWith('Requests must now prove'));
  const secret = secretIntro >= 0 ? lines[secretIntro + 1] : undefined;
  return { url, path: new URL(url).pathname, secret, reply };
}
