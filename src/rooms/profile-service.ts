/** Display names and avatars. A change is written into the user's member event in every joined room. */
import { MatrixError } from '../core/errors.js';
import type { Limiters } from '../ratelimit/limiters.js';
import type { Storage } from '../storage/index.js';
import { serverOf } from './ids.js';
import type { RemoteRooms } from './remote-rooms.js';
import type { RoomService } from './room-service.js';

export interface Profile {
  displayname?: string;
  avatar_url?: string;
}

/** Synapse's limits: a display name of 256 characters, an avatar URL of 1000. */
export const MAX_DISPLAYNAME_LENGTH = 256;
export const MAX_AVATAR_URL_LENGTH = 1000;

export class ProfileService {
  constructor(
    private readonly storage: Storage,
    private readonly rooms: RoomService,
    private readonly limiters: Limiters,
    private readonly serverName: string,
    private readonly remote?: RemoteRooms | undefined,
    /** Asks application services about an unknown user of their namespaces; true when one created them. */
    private readonly appservices?: { askAboutUser(userId: string): Promise<boolean> } | undefined,
  ) {}

  /** A user's profile; a user of another server is asked of their server. */
  async get(userId: string): Promise<Profile> {
    if (this.remote && serverOf(userId) !== this.serverName) {
      const remote = await this.remote.profile(userId);
      if (!remote) throw new MatrixError('M_NOT_FOUND', 'Profile was not found');
      return remote as Profile;
    }
    let user = await this.storage.users.get(userId);
    if (!user && (await this.appservices?.askAboutUser(userId))) user = await this.storage.users.get(userId);
    if (!user || user.deactivated === 1) throw new MatrixError('M_NOT_FOUND', 'Profile was not found');
    const profile: Profile = {};
    if (user.displayname !== null) profile.displayname = user.displayname;
    if (user.avatar_url !== null) profile.avatar_url = user.avatar_url;
    return profile;
  }

  async setDisplayname(userId: string, displayname: string | null): Promise<void> {
    if (displayname !== null && displayname.length > MAX_DISPLAYNAME_LENGTH) {
      throw new MatrixError('M_INVALID_PARAM', `displayname is too long (max ${MAX_DISPLAYNAME_LENGTH})`);
    }
    await this.get(userId);
    // Each change writes an event in every joined room, so it counts as a message.
    await this.limiters.checkMessage(userId);
    await this.storage.users.update(userId, { displayname: displayname === '' ? null : displayname });
    await this.rooms.refreshMemberEvents(userId);
  }

  async setAvatarUrl(userId: string, avatarUrl: string | null): Promise<void> {
    if (avatarUrl !== null && avatarUrl.length > MAX_AVATAR_URL_LENGTH) {
      throw new MatrixError('M_INVALID_PARAM', `avatar_url is too long (max ${MAX_AVATAR_URL_LENGTH})`);
    }
    await this.get(userId);
    await this.limiters.checkMessage(userId);
    await this.storage.users.update(userId, { avatar_url: avatarUrl === '' ? null : avatarUrl });
    await this.rooms.refreshMemberEvents(userId);
  }
}
