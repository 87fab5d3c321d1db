/**
 * Webhook ingress: `PUT` or `POST /webhook/<id>`. The body is kept as bytes (signatures are computed
 * over them) and read as JSON whatever its Content-Type (curl's `-d` says form-encoded), except a
 * form with a `payload=` field, which old Slack-style senders and GitHub's form option send.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { Bridge } from '../../bridge/bridge.js';
import { MatrixError } from '../../core/errors.js';
import { JsonTooDeepError, parseJsonSafely } from '../../core/json.js';
import type { Metrics, WebhookOutcome } from '../../ops/metrics.js';

const WebhookParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256 }) });
const NOT_JSON_MESSAGE = 'The body must be JSON such as {"text": "Hello"}.';

/** The delivery's outcome for metrics, from how it was answered. */
function outcomeOf(err: unknown): WebhookOutcome {
  if (!(err instanceof MatrixError)) return 'failed';
  switch (err.errcode) {
    case 'M_NOT_FOUND':
      return 'not_found';
    case 'M_FORBIDDEN':
      return 'forbidden';
    case 'M_LIMIT_EXCEEDED':
      return 'rate_limited';
    default:
      return err.status >= 500 ? 'failed' : 'invalid';
  }
}

export function webhookRoutes(bridge: Bridge, maxBodyBytes: number, metrics?: Metrics): FastifyPluginAsyncTypebox {
  return async (app) => {
    // This plugin's own parser (Fastify scopes parsers to the plugin): the raw bytes, untouched.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

    const handler = async (request: FastifyRequest<{ Params: { id: string } }>) => {
      const rawBody = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const payload = () => readPayload(rawBody, request.headers['content-type']);
      let received: Awaited<ReturnType<typeof bridge.webhooks.receive>>;
      try {
        received = await bridge.webhooks.receive(request.params.id, {
          headers: request.headers,
          rawBody,
          payload,
          // The request line names the webhook, so an operator can tell which one a failed post hit.
          found: (name) => {
            request.webhookName = name;
          },
        });
      } catch (err) {
        metrics?.webhookDeliveries.inc({ outcome: outcomeOf(err) });
        throw err;
      }
      metrics?.webhookDeliveries.inc({ outcome: 'skipped' in received ? 'skipped' : 'posted' });
      // The sender's delivery log shows why nothing appeared in the room.
      if ('skipped' in received) return { ok: true, skipped: received.skipped };
      if (received.rendererError !== undefined) {
        request.log.warn({ err: received.rendererError, sender: received.sender, webhook: request.webhookName }, 'a webhook renderer failed; posted the generic rendering');
      }
      return { ok: true, event_id: received.eventId };
    };
    for (const method of ['PUT', 'POST'] as const) {
      app.route({ method, url: '/webhook/:id', bodyLimit: maxBodyBytes, schema: { params: WebhookParams }, handler });
    }
  };
}

/** The JSON a delivery carries, or M_NOT_JSON. */
function readPayload(rawBody: Buffer, contentType: string | undefined): unknown {
  const text = rawBody.toString('utf8');
  if (text.trim() === '') throw new MatrixError('M_NOT_JSON', NOT_JSON_MESSAGE);
  // A form with a payload field; but JSON sent with curl's default form type is still JSON.
  const isForm = (contentType?.toLowerCase().startsWith('application/x-www-form-urlencoded') ?? false) && !/^\s*[[{]/.test(text);
  const json = (isForm ? new URLSearchParams(text).get('payload') : null) ?? text;
  try {
    return parseJsonSafely(json);
  } catch (err) {
    if (err instanceof JsonTooDeepError) throw new MatrixError('M_BAD_JSON', `The body is nested too deeply (more than ${err.limit} levels).`);
    throw new MatrixError('M_NOT_JSON', isForm && json !== text ? 'The form field "payload" must hold JSON.' : NOT_JSON_MESSAGE);
  }
}
