/**
 * Service users: accounts the server itself acts as (the bridge user; application services'
 * senders, who act through their as_token). Their localparts are reserved: nobody can register them, create them through
 * the CLI or the admin API, give them a password, or log in as them. The bridge's DMs hold
 * webhook URLs and signing secrets, so a login as the bridge would be a login to all of them.
 */
import type { Config } from '../config/index.js';

/**
 * The localparts reserved for service users, whether or not the service is enabled now. Except the
 * bridge user when an appservice's exclusive namespace holds it (the bridge run as that appservice,
 * `bot-homeserver bridge`; this server's own bridge is then disabled): that appservice registers it.
 */
export function serviceLocalparts(config: Pick<Config, 'bridge' | 'app_services' | 'server_name'>): ReadonlySet<string> {
  const bridgeUser = `@${config.bridge.localpart}:${config.server_name}`;
  const bridgeIsAppservice =
    !config.bridge.enabled && config.app_services.some((service) => service.senderLocalpart !== config.bridge.localpart && service.namespaces.users.some((namespace) => namespace.exclusive && namespace.pattern.test(bridgeUser)));
  return new Set([...(bridgeIsAppservice ? [] : [config.bridge.localpart]), ...config.app_services.map((service) => service.senderLocalpart)]);
}
