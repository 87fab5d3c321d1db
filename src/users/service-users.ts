/**
 * Service users: accounts the server itself acts as (the bridge user; application services'
 * senders, who act through their as_token). Their localparts are reserved: nobody can register them, create them through
 * the CLI or the admin API, give them a password, or log in as them. The bridge's DMs hold
 * webhook URLs and signing secrets, so a login as the bridge would be a login to all of them.
 */
import type { Config } from '../config/index.js';

/** The localparts reserved for service users, whether or not the service is enabled now. */
export function serviceLocalparts(config: Pick<Config, 'bridge' | 'app_services'>): ReadonlySet<string> {
  return new Set([config.bridge.localpart, ...config.app_services.map((service) => service.senderLocalpart)]);
}
