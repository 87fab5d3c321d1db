/** Password hashing with argon2id; the cost comes from `password_hashing` in the config. */
import argon2 from 'argon2';
import { MatrixError } from '../core/errors.js';

export interface PasswordHashingOptions {
  memory_cost_kib: number;
  time_cost: number;
  parallelism: number;
}

/** Synapse refuses longer passwords too: hashing megabytes is a cheap way to burn our CPU. */
export const MAX_PASSWORD_LENGTH = 512;

export class PasswordHasher {
  /** Verified against when the user does not exist, so a wrong user name costs the same time. */
  private dummyHash: Promise<string> | undefined;

  constructor(private readonly options: PasswordHashingOptions) {}

  async hash(password: string): Promise<string> {
    assertPasswordLength(password);
    return argon2.hash(password, {
      type: argon2.argon2id,
      memoryCost: this.options.memory_cost_kib,
      timeCost: this.options.time_cost,
      parallelism: this.options.parallelism,
    });
  }

  /** True when `password` matches `hash`; a missing hash (no such user, no password) is false. */
  async verify(hash: string | null | undefined, password: string): Promise<boolean> {
    if (password.length > MAX_PASSWORD_LENGTH) return false;
    if (!hash) {
      this.dummyHash ??= this.hash('not a real password');
      await argon2.verify(await this.dummyHash, password).catch(() => false);
      return false;
    }
    try {
      return await argon2.verify(hash, password);
    } catch {
      return false;
    }
  }
}

export function assertPasswordLength(password: string): void {
  if (password.length > MAX_PASSWORD_LENGTH) {
    throw new MatrixError('M_INVALID_PARAM', `Password too long (at most ${MAX_PASSWORD_LENGTH} characters)`);
  }
}
