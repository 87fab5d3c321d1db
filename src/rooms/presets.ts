/**
 * The initial state of a new room, in the order the spec's `createRoom` gives: create, the
 * creator's join, power levels, canonical alias, preset state, `initial_state`, name, topic,
 * then invites. Pure: the room service turns the result into events.
 */
import type { JsonObject } from './events.js';
import { knownRoomVersion } from './room-versions.js';

export type Preset = 'private_chat' | 'public_chat' | 'trusted_private_chat';

export interface StateDraft {
  type: string;
  stateKey: string;
  content: JsonObject;
}

export interface CreateRoomPlan {
  roomVersion: string;
  creator: string;
  creatorProfile: JsonObject;
  preset: Preset;
  creationContent: JsonObject;
  powerLevelOverride: JsonObject | undefined;
  canonicalAlias: string | undefined;
  initialState: StateDraft[];
  name: string | undefined;
  topic: string | undefined;
  invites: Array<{ userId: string; profile: JsonObject }>;
  isDirect: boolean;
}

/**
 * Synapse's default power levels for a new room; presets and the override adjust them. From room
 * version 12 the creator is above power levels and may not be listed in them.
 */
function defaultPowerLevels(creator: string | undefined): JsonObject {
  return {
    users: creator === undefined ? {} : { [creator]: 100 },
    users_default: 0,
    events: {
      'm.room.name': 50,
      'm.room.power_levels': 100,
      'm.room.history_visibility': 100,
      'm.room.canonical_alias': 50,
      'm.room.avatar': 50,
      'm.room.tombstone': 100,
      'm.room.server_acl': 100,
      'm.room.encryption': 100,
    },
    events_default: 0,
    state_default: 50,
    ban: 50,
    kick: 50,
    redact: 50,
    invite: 50,
    historical: 100,
  };
}

const PRESET_STATE: Record<Preset, { joinRule: string; historyVisibility: string; guestCanJoin: boolean; invite0: boolean; inviteesAreAdmins: boolean }> = {
  private_chat: { joinRule: 'invite', historyVisibility: 'shared', guestCanJoin: true, invite0: true, inviteesAreAdmins: false },
  trusted_private_chat: { joinRule: 'invite', historyVisibility: 'shared', guestCanJoin: true, invite0: true, inviteesAreAdmins: true },
  public_chat: { joinRule: 'public', historyVisibility: 'shared', guestCanJoin: false, invite0: false, inviteesAreAdmins: false },
};

export interface PlannedEvent {
  type: string;
  stateKey: string;
  content: JsonObject;
  /** Invites are sent by the creator but target someone else. */
  isInvite?: boolean;
}

export function planCreateRoom(plan: CreateRoomPlan): PlannedEvent[] {
  const version = knownRoomVersion(plan.roomVersion);
  const preset = PRESET_STATE[plan.preset];
  const events: PlannedEvent[] = [];
  // v11 dropped `creator` (the sender is the creator); v12 makes trusted invitees co-creators.
  const createContent: JsonObject = { ...plan.creationContent, room_version: plan.roomVersion };
  if (version.v11) delete createContent.creator;
  else createContent.creator = plan.creator;
  if (version.privilegedCreators && preset.inviteesAreAdmins && plan.invites.length > 0) {
    const additional = Array.isArray(createContent.additional_creators) ? (createContent.additional_creators as unknown[]) : [];
    createContent.additional_creators = [...new Set([...additional, ...plan.invites.map((invite) => invite.userId)])];
  }
  events.push({ type: 'm.room.create', stateKey: '', content: createContent });
  events.push({ type: 'm.room.member', stateKey: plan.creator, content: { ...plan.creatorProfile, membership: 'join' } });

  const powerLevels = defaultPowerLevels(version.privilegedCreators ? undefined : plan.creator);
  if (preset.invite0) powerLevels.invite = 0;
  if (preset.inviteesAreAdmins && !version.privilegedCreators) {
    const users = powerLevels.users as Record<string, number>;
    for (const invite of plan.invites) users[invite.userId] = 100;
  }
  Object.assign(powerLevels, plan.powerLevelOverride ?? {});
  events.push({ type: 'm.room.power_levels', stateKey: '', content: powerLevels });

  if (plan.canonicalAlias !== undefined) {
    events.push({ type: 'm.room.canonical_alias', stateKey: '', content: { alias: plan.canonicalAlias } });
  }

  // initial_state replaces the preset's events of the same type and key, and comes after them.
  const overridden = new Set(plan.initialState.map((s) => `${s.type}\u0000${s.stateKey}`));
  const presetState: PlannedEvent[] = [
    { type: 'm.room.join_rules', stateKey: '', content: { join_rule: preset.joinRule } },
    { type: 'm.room.history_visibility', stateKey: '', content: { history_visibility: preset.historyVisibility } },
  ];
  if (preset.guestCanJoin) presetState.push({ type: 'm.room.guest_access', stateKey: '', content: { guest_access: 'can_join' } });
  for (const event of presetState) if (!overridden.has(`${event.type}\u0000${event.stateKey}`)) events.push(event);
  for (const state of plan.initialState) events.push({ type: state.type, stateKey: state.stateKey, content: state.content });

  if (plan.name !== undefined) events.push({ type: 'm.room.name', stateKey: '', content: { name: plan.name } });
  if (plan.topic !== undefined) events.push({ type: 'm.room.topic', stateKey: '', content: { topic: plan.topic } });
  for (const invite of plan.invites) {
    events.push({
      type: 'm.room.member',
      stateKey: invite.userId,
      content: { ...invite.profile, membership: 'invite', ...(plan.isDirect ? { is_direct: true } : {}) },
      isInvite: true,
    });
  }
  return events;
}
