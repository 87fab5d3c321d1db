/**
 * `GET /health`: whether this process can serve. Live (it answers at all) and ready: the database
 * answers, and its migrations are exactly the ones this build knows (a database a newer version
 * migrated further is not one to serve from).
 */
import { databaseHealth, type Storage } from '../storage/index.js';

export interface HealthReport {
  status: 'ok' | 'unavailable';
  checks: { database: string; migrations: string };
}

export async function checkHealth(storage: Storage): Promise<HealthReport> {
  const database = await databaseHealth(storage.db);
  const databaseCheck = database.reachable ? 'ok' : 'unreachable';
  let migrations = 'ok';
  if (!database.reachable) migrations = 'unknown';
  else if (database.unknown.length > 0) migrations = `applied by a newer version: ${database.unknown.join(', ')}`;
  else if (database.missing.length > 0) migrations = `not applied: ${database.missing.join(', ')}`;
  return { status: databaseCheck === 'ok' && migrations === 'ok' ? 'ok' : 'unavailable', checks: { database: databaseCheck, migrations } };
}
