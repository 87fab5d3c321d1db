/**
 * Facts about this server that the HTTP layer reports. `publicBaseUrl` is settled when the server
 * starts listening if the config does not fix it (with `listen.port: 0` it is known only then).
 */
export interface ServerInfo {
  serverName: string;
  publicBaseUrl: string;
  /** True when `public_baseurl` came from the config and must not be replaced. */
  fixedBaseUrl: boolean;
}

export function serverInfoFor(config: { server_name: string; public_baseurl?: string | undefined; listen: { host: string; port: number }; tls_certificate_path?: string | null }): ServerInfo {
  if (config.public_baseurl) {
    return { serverName: config.server_name, publicBaseUrl: withTrailingSlash(config.public_baseurl), fixedBaseUrl: true };
  }
  return {
    serverName: config.server_name,
    publicBaseUrl: baseUrlFor(config.listen.host, config.listen.port, (config.tls_certificate_path ?? null) !== null),
    fixedBaseUrl: false,
  };
}

export function baseUrlFor(host: string, port: number, tls = false): string {
  const shown = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `${tls ? 'https' : 'http'}://${shown}:${port}/`;
}

export function withTrailingSlash(url: string): string {
  return url.endsWith('/') ? url : `${url}/`;
}
