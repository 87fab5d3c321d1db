/**
 * `POST /user_directory/search`: the users a user may find, as Synapse finds them by default
 * (`search_all_users: false`): those who share a room with the searcher (not the searcher, unless
 * the room is public: joinable by anyone or world-readable, so that changing a room's join rule or
 * history visibility takes its members in and out), and those in rooms published in the directory. Matched on the user id and the display name their member event
 * carries in those rooms; computed from the rooms' current state, bounded per request. This
 * server's guests are never found (as in Synapse).
 */
import type { JsonObject } from './events.js';
import type { RoomCache } from './room-cache.js';
import type { RoomSnapshot } from './room-snapshot.js';

/** Rooms and members one search reads at most: a directory search must stay cheap. */
const MAX_ROOMS_SCANNED = 1_000;
const MAX_MEMBERS_SCANNED = 100_000;

export interface DirectoryResult {
  limited: boolean;
  results: JsonObject[];
}

export class UserDirectory {
  constructor(
    private readonly cache: RoomCache,
    private readonly publicRoomIds: () => Promise<string[]>,
    /** Whether a user is a guest account of this server (asked only of members joined as guests). */
    private readonly isLocalGuest: (userId: string) => Promise<boolean> = async () => false,
  ) {}

  async search(searcher: string, term: string, limit: number): Promise<DirectoryResult> {
    const needle = term.trim().toLowerCase();
    const roomIds = new Set<string>();
    const published = new Set(await this.publicRoomIds());
    for (const [roomId, entry] of await this.cache.roomsOf(searcher)) if (entry.membership === 'join') roomIds.add(roomId);
    for (const roomId of published) roomIds.add(roomId);

    const found = new Map<string, { displayname?: string; avatarUrl?: string }>();
    const guestCandidates = new Set<string>();
    let rooms = 0;
    let members = 0;
    for (const roomId of roomIds) {
      if (++rooms > MAX_ROOMS_SCANNED || members > MAX_MEMBERS_SCANNED) break;
      const room = await this.cache.room(roomId);
      if (!room) continue;
      // As Synapse: a public room (published, joinable by anyone or world-readable) shows all its
      // members, the searcher too; a private one shows the searcher the others who share it.
      const isPublic = published.has(roomId) || isPublicRoom(room);
      for (const userId of room.joinedUsers()) {
        members += 1;
        if (found.has(userId) || (userId === searcher && !isPublic)) continue;
        const profile = profileIn(room, userId);
        if (matches(needle, userId, profile.displayname)) found.set(userId, profile);
        // A guest's join says `kind: guest`; the account decides (an upgraded guest is found).
        if (room.get('m.room.member', userId)?.content.kind === 'guest') guestCandidates.add(userId);
      }
    }
    for (const userId of guestCandidates) if (found.has(userId) && (await this.isLocalGuest(userId))) found.delete(userId);
    const ranked = [...found.entries()].sort(([a, pa], [b, pb]) => rank(needle, a, pa.displayname) - rank(needle, b, pb.displayname) || a.localeCompare(b));
    return {
      limited: ranked.length > limit,
      results: ranked.slice(0, limit).map(([userId, profile]) => ({
        user_id: userId,
        ...(profile.displayname !== undefined ? { display_name: profile.displayname } : {}),
        ...(profile.avatarUrl !== undefined ? { avatar_url: profile.avatarUrl } : {}),
      })),
    };
  }
}

/** Synapse's test of a room whose members are in the directory: public join rule, or world-readable history. */
function isPublicRoom(room: RoomSnapshot): boolean {
  return room.get('m.room.join_rules')?.content.join_rule === 'public' || room.historyVisibility() === 'world_readable';
}

function profileIn(room: RoomSnapshot, userId: string): { displayname?: string; avatarUrl?: string } {
  const content = room.get('m.room.member', userId)?.content ?? {};
  return {
    ...(typeof content.displayname === 'string' ? { displayname: content.displayname } : {}),
    ...(typeof content.avatar_url === 'string' ? { avatarUrl: content.avatar_url } : {}),
  };
}

function matches(needle: string, userId: string, displayname: string | undefined): boolean {
  if (needle === '') return true;
  return userId.toLowerCase().includes(needle) || (displayname?.toLowerCase().includes(needle) ?? false);
}

/** Best first: a name or localpart that starts with the term, then any other match. */
function rank(needle: string, userId: string, displayname: string | undefined): number {
  const localpart = userId.slice(1, userId.indexOf(':')).toLowerCase();
  if (displayname?.toLowerCase().startsWith(needle) || localpart.startsWith(needle)) return 0;
  return 1;
}
