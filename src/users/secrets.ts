/**
 * Secrets we hand out (access tokens, refresh tokens, bot secrets) and how we keep them: only a
 * SHA-256 hash is stored. These secrets carry 256 random bits, so a fast hash is enough to make a
 * copied database useless for logging in; passwords chosen by people go through argon2 instead.
 */
import { createHash, randomBytes, randomInt } from 'node:crypto';

const SECRET_BYTES = 32;

export function generateAccessToken(): string {
  return `bhs_at_${randomBytes(SECRET_BYTES).toString('base64url')}`;
}

export function generateRefreshToken(): string {
  return `bhs_rt_${randomBytes(SECRET_BYTES).toString('base64url')}`;
}

/** A bot's secret: its password, 256 random bits, printable without quoting. */
export function generateBotSecret(): string {
  return randomBytes(SECRET_BYTES).toString('base64url');
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

const DEVICE_ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';

/** Ten upper-case letters, like Synapse's generated device ids. */
export function generateDeviceId(): string {
  let id = '';
  for (let i = 0; i < 10; i++) id += DEVICE_ID_ALPHABET[randomInt(DEVICE_ID_ALPHABET.length)];
  return id;
}
