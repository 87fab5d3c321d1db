/**
 * `bot-homeserver/testing`: the homeserver as a test double for bot projects.
 * See docs/testing-bots.md.
 */
export {
  startTestHomeserver,
  TestHomeserverError,
  type Actor,
  type CreateRoomOptions,
  type CreateUserOptions,
  type StartTestHomeserverOptions,
  type TestAccount,
  type TestBot,
  type TestHomeserver,
  type WaitForOptions,
  type RecordedRequest,
} from './test-homeserver.js';
export { Faults, type Fault, type FaultAction, type FaultMatch, type FaultSpec } from './faults.js';
export type { ClientEvent } from '../rooms/events.js';
export type { Clock } from '../core/clock.js';
