/**
 * Wires the domain services together. Passed explicitly (no global singletons), so a test, the
 * CLI and the HTTP app each build exactly what they use.
 */
import type { Clock } from './clock.js';
import type { Config } from './config/index.js';
import { Limiters } from './ratelimit/limiters.js';
import type { Storage } from './storage/index.js';
import { AccountService } from './users/account-service.js';
import { PasswordHasher } from './users/passwords.js';
import { RegistrationService } from './users/registration-service.js';
import { SessionService } from './users/session-service.js';

export interface Services {
  config: Config;
  clock: Clock;
  storage: Storage;
  limiters: Limiters;
  accounts: AccountService;
  sessions: SessionService;
  registration: RegistrationService;
}

export function createServices(config: Config, storage: Storage, clock: Clock): Services {
  const hasher = new PasswordHasher(config.password_hashing);
  const limiters = new Limiters(config, clock, storage);
  const sessions = new SessionService(storage, config, clock, hasher, limiters);
  const accounts = new AccountService(storage, config.server_name, clock, hasher);
  const registration = new RegistrationService(config, clock, accounts, sessions, limiters);
  return { config, clock, storage, limiters, accounts, sessions, registration };
}
