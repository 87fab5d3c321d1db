/** Room ids and aliases: generated, parsed and checked. */
import { randomInt } from 'node:crypto';
import { MatrixError } from '../core/errors.js';

const ROOM_ID_LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

/** `!<18 letters>:<server>`, like Synapse: about 100 bits, enough to be unguessable. */
export function newRoomId(serverName: string): string {
  let local = '';
  for (let i = 0; i < 18; i++) local += ROOM_ID_LETTERS[randomInt(ROOM_ID_LETTERS.length)];
  return `!${local}:${serverName}`;
}

/**
 * `!opaque:server` (room versions up to 11) or, from version 12, `!` and the create event's
 * reference hash (43 url-safe base64 characters, no server).
 */
export function isRoomId(value: string): boolean {
  return (/^![^:]+:.+$/.test(value) || /^![A-Za-z0-9_-]{43}$/.test(value)) && Buffer.byteLength(value) <= 255;
}

export function isRoomAlias(value: string): boolean {
  return /^#[^:]+:.+$/.test(value) && Buffer.byteLength(value) <= 255;
}

export function isUserId(value: string): boolean {
  return /^@[^:]+:.+$/.test(value) && Buffer.byteLength(value) <= 255;
}

export function serverOf(id: string): string {
  return id.slice(id.indexOf(':') + 1);
}

export function assertUserId(value: string): void {
  if (!isUserId(value)) throw new MatrixError('M_INVALID_PARAM', `Invalid user id: ${value.slice(0, 100)}`);
}

export function assertRoomAlias(value: string): void {
  if (!isRoomAlias(value)) throw new MatrixError('M_INVALID_PARAM', `Invalid room alias: ${value.slice(0, 100)}`);
}
