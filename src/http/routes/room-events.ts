/** Sending and reading events: send, state, redact, event, messages, context, typing, receipts. */
import { randomUUID } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { RECEIPT_TYPES, type ReceiptType } from '../../rooms/receipts-service.js';
import type { Services } from '../../services.js';
import { compileEventFilter, parseInlineEventFilter } from '../../sync/filters.js';
import { StringEnum } from '../../schemas.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';
import { optionalBody } from '../validation.js';

const JsonObject = Type.Object({}, { additionalProperties: true });
const RoomIdParams = Type.Object({ roomId: Type.String() });
const MAX_PAGE = 1000;

/** A transaction id of its own for a request that names none (the legacy POST forms). */
function untransacted(): string {
  return `post-${randomUUID()}`;
}

export function roomEventRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** PUT /rooms/{roomId}/send/{eventType}/{txnId} */
    app.put(
      '/rooms/:roomId/send/:eventType/:txnId',
      { ...GUEST_ROUTE, schema: { params: Type.Object({ roomId: Type.String(), eventType: Type.String(), txnId: Type.String() }), body: JsonObject } },
      async (request) => {
        const { roomId, eventType, txnId } = request.params;
        const eventId = await services.rooms.send(requesterOf(request), roomId, eventType, txnId, request.body);
        return { event_id: eventId };
      },
    );

    /**
     * POST /rooms/{roomId}/send/{eventType}: the legacy send without a transaction id (Synapse
     * still serves it). Each request is a new event: there is nothing to make a retry idempotent.
     */
    app.post(
      '/rooms/:roomId/send/:eventType',
      { ...GUEST_ROUTE, schema: { params: Type.Object({ roomId: Type.String(), eventType: Type.String() }), body: JsonObject } },
      async (request) => {
        const { roomId, eventType } = request.params;
        return { event_id: await services.rooms.send(requesterOf(request), roomId, eventType, untransacted(), request.body) };
      },
    );

    /** PUT /rooms/{roomId}/state/{eventType}/{stateKey}, with the empty state key written three ways. */
    const putState = async (roomId: string, type: string, stateKey: string, request: Parameters<typeof requesterOf>[0], content: Record<string, unknown>) => ({
      event_id: await services.rooms.setState(requesterOf(request), roomId, type, stateKey, content),
    });
    const StateParams = Type.Object({ roomId: Type.String(), eventType: Type.String(), stateKey: Type.String() });
    const EmptyKeyParams = Type.Object({ roomId: Type.String(), eventType: Type.String() });
    app.put('/rooms/:roomId/state/:eventType/:stateKey', { ...GUEST_ROUTE, schema: { params: StateParams, body: JsonObject } }, async (request) =>
      putState(request.params.roomId, request.params.eventType, request.params.stateKey, request, request.body),
    );
    for (const path of ['/rooms/:roomId/state/:eventType', '/rooms/:roomId/state/:eventType/']) {
      app.put(path, { ...GUEST_ROUTE, schema: { params: EmptyKeyParams, body: JsonObject } }, async (request) =>
        putState(request.params.roomId, request.params.eventType, '', request, request.body),
      );
    }

    /** GET /rooms/{roomId}/state/{eventType}/{stateKey}: the content, or the event with ?format=event. */
    const FormatQuery = Type.Object({ format: Type.Optional(StringEnum(['content', 'event'] as const)) });
    const getState = async (roomId: string, type: string, stateKey: string, request: Parameters<typeof requesterOf>[0], format: string | undefined) => {
      const event = await services.history.stateEvent(requesterOf(request), roomId, type, stateKey);
      return format === 'event' ? event : event.content;
    };
    app.get('/rooms/:roomId/state/:eventType/:stateKey', { ...GUEST_ROUTE, schema: { params: StateParams, querystring: FormatQuery } }, async (request) =>
      getState(request.params.roomId, request.params.eventType, request.params.stateKey, request, request.query.format),
    );
    for (const path of ['/rooms/:roomId/state/:eventType', '/rooms/:roomId/state/:eventType/']) {
      app.get(path, { ...GUEST_ROUTE, schema: { params: EmptyKeyParams, querystring: FormatQuery } }, async (request) =>
        getState(request.params.roomId, request.params.eventType, '', request, request.query.format),
      );
    }

    /** GET /rooms/{roomId}/state */
    app.get('/rooms/:roomId/state', { ...GUEST_ROUTE, schema: { params: RoomIdParams } }, async (request) =>
      services.history.state(requesterOf(request), request.params.roomId),
    );

    /** PUT /rooms/{roomId}/redact/{eventId}/{txnId} */
    app.put(
      '/rooms/:roomId/redact/:eventId/:txnId',
      {
        schema: {
          params: Type.Object({ roomId: Type.String(), eventId: Type.String(), txnId: Type.String() }),
          body: optionalBody(Type.Object({ reason: Type.Optional(Type.String({ maxLength: 2048 })) })),
        },
      },
      async (request) => {
        const { roomId, eventId, txnId } = request.params;
        return { event_id: await services.rooms.redact(requesterOf(request), roomId, eventId, txnId, request.body?.reason) };
      },
    );

    /** POST /rooms/{roomId}/redact/{eventId}: the legacy redaction without a transaction id. */
    app.post(
      '/rooms/:roomId/redact/:eventId',
      {
        schema: {
          params: Type.Object({ roomId: Type.String(), eventId: Type.String() }),
          body: optionalBody(Type.Object({ reason: Type.Optional(Type.String({ maxLength: 2048 })) })),
        },
      },
      async (request) => ({
        event_id: await services.rooms.redact(requesterOf(request), request.params.roomId, request.params.eventId, untransacted(), request.body?.reason),
      }),
    );

    /** GET /rooms/{roomId}/event/{eventId} */
    app.get('/rooms/:roomId/event/:eventId', { ...GUEST_ROUTE, schema: { params: Type.Object({ roomId: Type.String(), eventId: Type.String() }) } }, async (request) =>
      services.history.event(requesterOf(request), request.params.roomId, request.params.eventId),
    );

    /** GET /rooms/{roomId}/messages */
    app.get(
      '/rooms/:roomId/messages',
      {
        ...GUEST_ROUTE,
        schema: {
          params: RoomIdParams,
          querystring: Type.Object({
            from: Type.Optional(Type.String()),
            to: Type.Optional(Type.String()),
            // The spec requires dir; Synapse defaults it to forwards, and so do we.
            dir: Type.Optional(StringEnum(['b', 'f'] as const)),
            limit: Type.Optional(Type.Integer({ minimum: 0 })),
            filter: Type.Optional(Type.String()),
          }),
        },
      },
      async (request) => {
        const query = request.query;
        const filter = compileEventFilter(query.filter ? parseInlineEventFilter(query.filter) : undefined);
        return services.history.messages(requesterOf(request), request.params.roomId, {
          from: query.from,
          to: query.to,
          dir: query.dir ?? 'f',
          limit: Math.min(query.limit ?? filter.limit ?? 10, MAX_PAGE),
          matches: (e) => filter.matches(e),
          lazyLoadMembers: filter.lazyLoadMembers,
        });
      },
    );

    /** GET /rooms/{roomId}/context/{eventId} */
    app.get(
      '/rooms/:roomId/context/:eventId',
      {
        ...GUEST_ROUTE,
        schema: {
          params: Type.Object({ roomId: Type.String(), eventId: Type.String() }),
          querystring: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 0 })), filter: Type.Optional(Type.String()) }),
        },
      },
      async (request) => {
        const filter = compileEventFilter(request.query.filter ? parseInlineEventFilter(request.query.filter) : undefined);
        return services.history.context(
          requesterOf(request),
          request.params.roomId,
          request.params.eventId,
          Math.min(request.query.limit ?? 10, MAX_PAGE),
          (e) => filter.matches(e),
          filter.lazyLoadMembers,
        );
      },
    );

    /** PUT /rooms/{roomId}/typing/{userId} */
    app.put(
      '/rooms/:roomId/typing/:userId',
      {
        schema: {
          params: Type.Object({ roomId: Type.String(), userId: Type.String() }),
          body: Type.Object({ typing: Type.Boolean(), timeout: Type.Optional(Type.Integer({ minimum: 0 })) }),
        },
      },
      async (request) => {
        const requester = requesterOf(request);
        if (request.params.userId !== requester.userId) throw new MatrixError('M_FORBIDDEN', 'Cannot set another user\u2019s typing state');
        await services.roomReader.roomWhereJoined(request.params.roomId, requester.userId);
        services.typing.setTyping(request.params.roomId, requester.userId, request.body.typing, request.body.timeout ?? 30_000);
        return {};
      },
    );

    /** POST /rooms/{roomId}/receipt/{receiptType}/{eventId} */
    app.post(
      '/rooms/:roomId/receipt/:receiptType/:eventId',
      {
        schema: {
          params: Type.Object({ roomId: Type.String(), receiptType: Type.String(), eventId: Type.String() }),
          body: optionalBody(Type.Object({ thread_id: Type.Optional(Type.String()) })),
        },
      },
      async (request) => {
        const { roomId, receiptType, eventId } = request.params;
        if (!(RECEIPT_TYPES as readonly string[]).includes(receiptType)) {
          throw new MatrixError('M_INVALID_PARAM', `Receipt type must be one of ${RECEIPT_TYPES.join(', ')}`);
        }
        const threadId = request.body?.thread_id;
        await services.receipts.setReceipt(requesterOf(request).userId, roomId, receiptType as ReceiptType, eventId, threadId === 'main' ? 'main' : threadId);
        return {};
      },
    );

    /** POST /rooms/{roomId}/read_markers */
    app.post(
      '/rooms/:roomId/read_markers',
      {
        schema: {
          params: RoomIdParams,
          body: optionalBody(
            Type.Object({
              'm.fully_read': Type.Optional(Type.String()),
              'm.read': Type.Optional(Type.String()),
              'm.read.private': Type.Optional(Type.String()),
            }),
          ),
        },
      },
      async (request) => {
        const userId = requesterOf(request).userId;
        const body = request.body ?? {};
        for (const type of RECEIPT_TYPES) {
          const eventId = body[type];
          if (eventId !== undefined) await services.receipts.setReceipt(userId, request.params.roomId, type, eventId, undefined);
        }
        return {};
      },
    );
  };
}
