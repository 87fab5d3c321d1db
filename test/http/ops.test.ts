/** `/health` and Prometheus metrics: what an operator's load balancer and Prometheus read. */
import { afterEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { capturingLogger } from '../support/logs.js';

let hs: TestHomeserver | undefined;
afterEach(async () => {
  await hs?.close();
  hs = undefined;
});

const metricsOn = (extra: Record<string, unknown> = {}) => ({ metrics: { enabled: true, ...extra } });

/** The value of one sample line (`name{labels} value`), or undefined. */
function sample(text: string, line: string): number | undefined {
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found === undefined ? undefined : Number(found.slice(line.length + 1));
}

describe('GET /health', () => {
  it('is ok while the database answers with the migrations this build knows, and 503 otherwise', async () => {
    hs = await startTestHomeserver();
    const ok = await hs.http.get('/health');
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ status: 'ok', checks: { database: 'ok', migrations: 'ok' } });

    // A newer version migrated this database further: not a database to serve from.
    await hs.services.storage.db.insertInto('kysely_migration' as never).values({ name: '9999-from-the-future', timestamp: new Date().toISOString() } as never).execute();
    const newer = await hs.http.get('/health');
    expect(newer.status).toBe(503);
    expect(newer.body).toMatchObject({ status: 'unavailable', checks: { database: 'ok', migrations: 'applied by a newer version: 9999-from-the-future' } });
  });
});

describe('metrics', () => {
  it('counts requests by route pattern and status, events, commits, parked syncs and database time', async () => {
    hs = await startTestHomeserver(metricsOn());
    const alice = await createUser(hs, 'alice');
    const room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, { type: 'bearer' }).send({})).body.room_id as string;
    for (let i = 0; i < 3; i++) {
      await hs.http.put(`/_matrix/client/v3/rooms/${room}/send/m.room.message/t${i}`).auth(alice.accessToken, { type: 'bearer' }).send({ msgtype: 'm.text', body: 'hi' });
    }
    await hs.http.get('/_matrix/client/v3/rooms/!nope:test.local/state').auth(alice.accessToken, { type: 'bearer' });

    const res = await hs.http.get('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = res.text;
    const sendRoute = '/_matrix/client/v3/rooms/:roomId/send/:eventType/:txnId';
    expect(sample(text, `bot_homeserver_http_request_duration_seconds_count{method="PUT",route="${sendRoute}",status="200"}`)).toBe(3);
    expect(sample(text, 'bot_homeserver_http_request_duration_seconds_count{method="GET",route="/_matrix/client/v3/rooms/:roomId/state",status="403"}')).toBe(1);
    // No raw paths: ids would make a series each.
    expect(text).not.toContain(room);
    expect(sample(text, 'bot_homeserver_events_persisted_total')).toBeGreaterThanOrEqual(3 + 5);
    expect(sample(text, 'bot_homeserver_event_commit_batch_requests_count')).toBeGreaterThanOrEqual(4);
    expect(sample(text, 'bot_homeserver_sync_parked')).toBe(0);
    expect(sample(text, 'bot_homeserver_database_queries_total{outcome="ok"}')).toBeGreaterThan(10);
    expect(sample(text, 'bot_homeserver_database_query_seconds_total')).toBeGreaterThan(0);
    expect(sample(text, 'bot_homeserver_federation_queued{kind="pdu"}')).toBe(0);
    expect(text).toContain('nodejs_eventloop_lag_seconds');
    expect(text).toContain('process_resident_memory_bytes');
  });

  it('times how fast a parked sync wakes, and counts it while parked', async () => {
    hs = await startTestHomeserver(metricsOn());
    const alice = await createUser(hs, 'alice');
    const auth = { type: 'bearer' } as const;
    const room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, auth).send({})).body.room_id as string;
    const since = (await hs.http.get('/_matrix/client/v3/sync').auth(alice.accessToken, auth)).body.next_batch as string;
    const parked = hs.http.get(`/_matrix/client/v3/sync?since=${since}&timeout=10000`).auth(alice.accessToken, auth).then((r) => r);
    while (hs.services.notifier.parkedCount() === 0) await new Promise((r) => setTimeout(r, 5));
    expect(sample((await hs.http.get('/metrics')).text, 'bot_homeserver_sync_parked')).toBe(1);
    await hs.http.put(`/_matrix/client/v3/rooms/${room}/send/m.room.message/w`).auth(alice.accessToken, auth).send({ msgtype: 'm.text', body: 'wake' });
    expect((await parked).status).toBe(200);
    expect(sample((await hs.http.get('/metrics')).text, 'bot_homeserver_sync_wake_seconds_count')).toBe(1);
  });

  it('answers only the allowed addresses, never through a proxy, at its configured path, and not at all when off', async () => {
    hs = await startTestHomeserver(metricsOn({ allowed_addresses: ['10.0.0.0/8'] }));
    const refused = await hs.http.get('/metrics');
    expect(refused.status).toBe(404);
    expect(refused.body.errcode).toBe('M_UNRECOGNIZED');
    await hs.close();

    hs = await startTestHomeserver({ ...metricsOn({ path: '/internal/prometheus' }), listen: { x_forwarded: true } });
    expect((await hs.http.get('/internal/prometheus')).status).toBe(200);
    // Through the proxy (it adds X-Forwarded-For), even from loopback and even claiming loopback.
    expect((await hs.http.get('/internal/prometheus').set('X-Forwarded-For', '127.0.0.1')).status).toBe(404);
    expect((await hs.http.get('/metrics')).status).toBe(404);
    await hs.close();

    hs = await startTestHomeserver();
    expect((await hs.http.get('/metrics')).status).toBe(404);
    expect((await hs.http.get('/health')).status).toBe(200);
  });

  it('counts webhook deliveries by outcome', async () => {
    hs = await startTestHomeserver({ ...metricsOn(), bridge: { enabled: true } });
    expect((await hs.http.post('/webhook/no-such-hook').send({ text: 'x' })).status).toBe(404);
    expect(sample((await hs.http.get('/metrics')).text, 'bot_homeserver_webhook_deliveries_total{outcome="not_found"}')).toBe(1);
  });
});

describe('the request log', () => {
  it('logs routine polling answered well at debug, and everything else (its failures too) at info', async () => {
    const { logger, lines } = capturingLogger('info');
    hs = await startTestHomeserver({}, { logger });
    const alice = await createUser(hs, 'alice');
    await hs.http.get('/_matrix/client/v3/sync').auth(alice.accessToken, { type: 'bearer' });
    await hs.http.get('/_matrix/client/r0/sync').auth(alice.accessToken, { type: 'bearer' });
    await hs.http.get('/_matrix/client/versions');
    await hs.http.get('/health');
    await hs.http.get('/_matrix/client/v3/sync').auth('wrong-token', { type: 'bearer' });
    const requests = lines.map((line) => JSON.parse(line) as { msg: string; url?: string; status?: number }).filter((line) => line.msg === 'request');
    expect(requests.map((r) => `${r.url} ${r.status}`)).toEqual(['/_matrix/client/v3/login 200', '/_matrix/client/v3/account/whoami 200', '/_matrix/client/v3/sync 401']);
  });
});
