/**
 * The bare-Fastify reference: one route answering {hello: 'world'} at the same path shape as a
 * message send (PUT with a JSON body, so Fastify parses it as it would a message), and nothing
 * else: no auth, no database. Forked by the limits scenario; sends { port } once listening.
 */
import Fastify from 'fastify';

const app = Fastify({ logger: false });
app.put('/_matrix/client/v3/rooms/:roomId/send/:eventType/:txnId', async () => ({ hello: 'world' }));
await app.listen({ host: '127.0.0.1', port: 0 });
process.send({ port: app.server.address().port });
process.on('disconnect', () => process.exit(0));
