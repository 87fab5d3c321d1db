/**
 * Operations endpoints, outside the Matrix APIs: `GET /health` for load balancers and supervisors,
 * and Prometheus metrics (`metrics.path`, default `/metrics`) for the addresses the config allows.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { MatrixError } from '../../core/errors.js';
import type { Config } from '../../config/index.js';
import { addressInRanges } from '../../net/address-guard.js';
import type { HealthReport } from '../../ops/health.js';
import type { Metrics } from '../../ops/metrics.js';

export function opsRoutes(health: () => Promise<HealthReport>, metrics: Metrics | undefined, config: Config) {
  return async (app: FastifyInstance) => {
    app.get('/health', async (_request, reply) => {
      const report = await health();
      return reply.code(report.status === 'ok' ? 200 : 503).send(report);
    });

    if (!metrics) return;
    const allowed = addressInRanges(config.metrics.allowed_addresses);
    // The connection's own address: a forwarded-for header is the client's word, not a fact. Behind
    // a reverse proxy (x_forwarded) every request comes from the proxy, so one that carries the
    // proxy's forwarding headers is refused: scrape the server directly, not through the proxy.
    const mayScrape = (request: FastifyRequest) =>
      allowed(request.socket.remoteAddress ?? '') && !(config.listen.x_forwarded && (request.headers['x-forwarded-for'] !== undefined || request.headers.forwarded !== undefined));
    app.get(config.metrics.path, async (request, reply) => {
      // As Synapse answers a path it does not serve: nothing here for this client.
      if (!mayScrape(request)) throw new MatrixError('M_UNRECOGNIZED', 'Unrecognized request', { status: 404 });
      const { contentType, body } = await metrics.exposition();
      return reply.header('Content-Type', contentType).send(body);
    });
  };
}
