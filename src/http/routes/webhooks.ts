/**
 * Webhook ingress: `PUT` or `POST /webhook/<id>` with `{"text": ...}`. The body is read as JSON
 * whatever its Content-Type (curl's `-d` says form-encoded), up to the bridge's own size limit.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Bridge } from '../../bridge/bridge.js';
import { MatrixError } from '../errors.js';
import { NOT_JSON } from '../json-bodies.js';

const WebhookParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256 }) });

export function webhookRoutes(bridge: Bridge, maxBodyBytes: number): FastifyPluginAsyncTypebox {
  return async (app) => {
    const handler = async (request: { params: { id: string }; body: unknown }) => {
      if (request.body === undefined || request.body === NOT_JSON) {
        throw new MatrixError('M_NOT_JSON', 'The body must be JSON such as {"text": "Hello"}.');
      }
      const eventId = await bridge.webhooks.receive(request.params.id, request.body);
      return { ok: true, event_id: eventId };
    };
    for (const method of ['PUT', 'POST'] as const) {
      app.route({ method, url: '/webhook/:id', bodyLimit: maxBodyBytes, schema: { params: WebhookParams }, handler });
    }
  };
}
