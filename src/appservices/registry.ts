/**
 * The registered application services and what each may claim: users, aliases and rooms by its
 * namespaces (the spec's Application Service API, "Registration"). Pure over the registrations.
 */
import type { AppServiceRegistration, Namespace } from '../config/index.js';
import { MAX_MATCHED_LENGTH } from '../config/namespace-regex.js';
import type { StoredEvent } from '../rooms/events.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import { userIdFor } from '../users/user-ids.js';

export interface AppService extends AppServiceRegistration {
  /** `@sender_localpart:server_name`. */
  sender: string;
}

export class AppServiceRegistry {
  readonly all: readonly AppService[];
  private readonly byAsToken: ReadonlyMap<string, AppService>;

  constructor(registrations: readonly AppServiceRegistration[], serverName: string) {
    this.all = registrations.map((registration) => ({ ...registration, sender: userIdFor(registration.senderLocalpart, serverName) }));
    this.byAsToken = new Map(this.all.map((service) => [service.asToken, service]));
  }

  byToken(asToken: string): AppService | undefined {
    return this.byAsToken.get(asToken);
  }

  byId(id: string): AppService | undefined {
    return this.all.find((service) => service.id === id);
  }

  /** The sender localparts: service users, whom nobody may register or log in as. */
  senderLocalparts(): string[] {
    return this.all.map((service) => service.senderLocalpart);
  }

  /** The appservice that holds `userId` in an exclusive namespace, if any. */
  exclusiveOwnerOfUser(userId: string): AppService | undefined {
    return this.all.find((service) => service.namespaces.users.some((ns) => ns.exclusive && matchesOne(ns, userId)));
  }

  exclusiveOwnerOfAlias(alias: string): AppService | undefined {
    return this.all.find((service) => service.namespaces.aliases.some((ns) => ns.exclusive && matchesOne(ns, alias)));
  }

  /** Users the appservice may act as: its sender and its user namespaces. */
  isInterestedInUser(service: AppService, userId: string): boolean {
    return userId === service.sender || matches(service.namespaces.users, userId);
  }

  /** Appservices whose users may act without rate limits (`rate_limited: false`). */
  isExemptFromLimits(userId: string): boolean {
    return this.all.some((service) => !service.rateLimited && this.isInterestedInUser(service, userId));
  }

  /** Appservices whose alias namespaces hold `alias` (to ask them about an unknown alias). */
  servicesForAlias(alias: string): AppService[] {
    return this.all.filter((service) => service.url !== null && matches(service.namespaces.aliases, alias));
  }

  /** Appservices whose user namespaces hold `userId` (to ask them about an unknown user). */
  servicesForUser(userId: string): AppService[] {
    return this.all.filter((service) => service.url !== null && matches(service.namespaces.users, userId));
  }

  /**
   * Whether the appservice is to receive a room's event: it is in a room the appservice's
   * namespaces claim (by id or by a published alias), it concerns a namespaced user (as sender or
   * as the member event's subject), or a namespaced user is in the room (as Synapse decides).
   */
  isInterestedInEvent(service: AppService, event: StoredEvent, room: RoomSnapshot): boolean {
    if (this.isInterestedInUser(service, event.sender)) return true;
    if (event.type === 'm.room.member' && event.stateKey !== undefined && this.isInterestedInUser(service, event.stateKey)) return true;
    return this.isInterestedInRoom(service, room);
  }

  /** The room is claimed by the appservice, or one of its users is joined to it. */
  isInterestedInRoom(service: AppService, room: RoomSnapshot): boolean {
    if (matches(service.namespaces.rooms, room.roomId)) return true;
    if (service.namespaces.aliases.length > 0) {
      const canonical = room.get('m.room.canonical_alias')?.content;
      const aliases = [canonical?.alias, ...(Array.isArray(canonical?.alt_aliases) ? canonical.alt_aliases : [])];
      if (aliases.some((alias) => typeof alias === 'string' && matches(service.namespaces.aliases, alias))) return true;
    }
    for (const member of room.joinedUsers()) if (this.isInterestedInUser(service, member)) return true;
    return false;
  }
}

function matches(namespaces: readonly Namespace[], id: string): boolean {
  return namespaces.some((ns) => matchesOne(ns, id));
}

/** Ids longer than the spec allows are never in a namespace: what a regex costs grows with the length. */
function matchesOne(ns: Namespace, id: string): boolean {
  return id.length <= MAX_MATCHED_LENGTH && ns.pattern.test(id);
}
