/**
 * A user's devices (`/devices`, `/delete_devices`): each login is a device with its tokens.
 * Deleting one logs it out everywhere it is used; its encryption keys go with it.
 */
import { MatrixError } from '../core/errors.js';
import type { Storage, DeviceRow } from '../storage/index.js';
import { MAX_DEVICE_DISPLAY_NAME_LENGTH } from './session-service.js';

/** A device as the Client-Server API shows it. */
export interface DeviceView {
  device_id: string;
  display_name?: string;
  last_seen_ip?: string;
  last_seen_ts?: number;
}

/** The most devices one `/delete_devices` request may name (Synapse: 1,000). */
export const MAX_DEVICES_PER_DELETE = 1000;

export class DeviceService {
  constructor(
    private readonly storage: Storage,
    /** Devices of the user were deleted: their encryption keys go, and others are told. */
    private readonly devicesRemoved: (userId: string, deviceIds?: readonly string[]) => Promise<void> = async () => {},
    /** A device was made or renamed (Synapse counts a new name as a device-list change). */
    private readonly deviceChanged: (userId: string, deviceId: string) => Promise<void> = async () => {},
  ) {}

  async list(userId: string): Promise<DeviceView[]> {
    return (await this.storage.sessions.listDevices(userId)).map(viewOf);
  }

  async get(userId: string, deviceId: string): Promise<DeviceView> {
    const device = await this.storage.sessions.getDevice(userId, deviceId);
    if (!device) throw new MatrixError('M_NOT_FOUND', 'No device found');
    return viewOf(device);
  }

  async rename(userId: string, deviceId: string, displayName: string | null): Promise<void> {
    if (displayName !== null && displayName.length > MAX_DEVICE_DISPLAY_NAME_LENGTH) {
      throw new MatrixError('M_INVALID_PARAM', `Device display name is longer than ${MAX_DEVICE_DISPLAY_NAME_LENGTH} characters`, { status: 400 });
    }
    const before = await this.storage.sessions.getDevice(userId, deviceId);
    if (!(await this.storage.sessions.renameDevice(userId, deviceId, displayName))) throw new MatrixError('M_NOT_FOUND', 'No device found');
    if (before?.display_name !== displayName) await this.deviceChanged(userId, deviceId);
  }

  /**
   * A device that holds no token: the bridge's crypto device on this server, which acts in
   * process. Made once; its name is kept up to date.
   */
  async ensure(userId: string, deviceId: string, displayName: string, now: number): Promise<void> {
    const changed = await this.storage.transaction(async (stores) => {
      const existing = await stores.sessions.getDevice(userId, deviceId);
      if (!existing) {
        await stores.sessions.insertDevice({ user_id: userId, device_id: deviceId, display_name: displayName, created_ts: now, last_seen_ts: null, last_seen_ip: null, last_seen_user_agent: null });
        return true;
      } else if (existing.display_name !== displayName) {
        await stores.sessions.renameDevice(userId, deviceId, displayName);
        return true;
      }
      return false;
    });
    if (changed) await this.deviceChanged(userId, deviceId);
  }

  /**
   * The admin `whois` answer: each device of the user with its one "session" and the connection
   * it was last seen on (none yet for a device that has made no request since it was recorded).
   */
  async whois(userId: string): Promise<{ user_id: string; devices: Record<string, { sessions: Array<{ connections: Array<{ ip: string; last_seen: number; user_agent: string | null }> }> }> }> {
    const devices: Record<string, { sessions: Array<{ connections: Array<{ ip: string; last_seen: number; user_agent: string | null }> }> }> = {};
    for (const device of await this.storage.sessions.listDevices(userId)) {
      const connections = device.last_seen_ip !== null && device.last_seen_ts !== null ? [{ ip: device.last_seen_ip, last_seen: Number(device.last_seen_ts), user_agent: device.last_seen_user_agent }] : [];
      devices[device.device_id] = { sessions: [{ connections }] };
    }
    return { user_id: userId, devices };
  }

  /** Deletes the devices with their tokens; devices that do not exist are skipped (deleting is idempotent). */
  async delete(userId: string, deviceIds: readonly string[]): Promise<void> {
    await this.storage.transaction(async (stores) => {
      for (const deviceId of deviceIds) {
        await stores.sessions.deleteDevice(userId, deviceId);
        await stores.deviceInbox.deleteForDevice(userId, deviceId);
      }
    });
    await this.devicesRemoved(userId, deviceIds);
  }
}

function viewOf(device: DeviceRow): DeviceView {
  return {
    device_id: device.device_id,
    ...(device.display_name !== null ? { display_name: device.display_name } : {}),
    ...(device.last_seen_ip !== null ? { last_seen_ip: device.last_seen_ip } : {}),
    ...(device.last_seen_ts !== null ? { last_seen_ts: Number(device.last_seen_ts) } : {}),
  };
}
