/** Row types of every table, as Kysely sees them. Keep in step with `migrations/`. */
import type { Generated } from 'kysely';

export interface UsersTable {
  user_id: string;
  localpart: string;
  password_hash: string | null;
  admin: number;
  user_type: string | null;
  displayname: string | null;
  avatar_url: string | null;
  deactivated: number;
  created_ts: number;
}

export interface DevicesTable {
  user_id: string;
  device_id: string;
  display_name: string | null;
  created_ts: number;
  last_seen_ts: number | null;
  last_seen_ip: string | null;
}

export interface AccessTokensTable {
  id: Generated<number>;
  token_hash: string;
  user_id: string;
  device_id: string;
  created_ts: number;
  expires_ts: number | null;
  refresh_token_id: number | null;
  used: Generated<number>;
}

export interface RefreshTokensTable {
  id: Generated<number>;
  token_hash: string;
  user_id: string;
  device_id: string;
  created_ts: number;
  expires_ts: number | null;
  next_token_id: number | null;
}

export interface RatelimitOverridesTable {
  user_id: string;
  messages_per_second: number;
  burst_count: number;
}

export interface Database {
  users: UsersTable;
  devices: DevicesTable;
  access_tokens: AccessTokensTable;
  refresh_tokens: RefreshTokensTable;
  ratelimit_overrides: RatelimitOverridesTable;
}
