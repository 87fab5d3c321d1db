/**
 * Gaps in rooms' timelines, for events from other servers that arrive after a long silence
 * (the sender offline, or this server): Synapse's model.
 * - `events.gap_before`: the event was placed on prev_events this server did not have (their
 *   state asked of the sender): a sync whose timeline reaches it stops there, `limited`, and the
 *   client pages back over the gap with /messages.
 * - `events.backfilled_at`: the event came later than its place in the room, from another server's
 *   /backfill: shown in history (/messages, /context, /event), never in /sync, which has moved on.
 *   Such events get positions below zero, like outliers, so every stream reader passes them by;
 *   the column holds the position at which history visibility judges them (that of the event the
 *   gap lay under: who was in the room then may see them).
 * - `backward_extremities`: the events missing below a gap (prev_events of events we hold), where
 *   /backfill starts from; a row goes when its event is stored. `child_depth` is the depth of the
 *   deepest event we hold that names it: a page of /messages reaching below it crosses the gap;
 *   `child_stream` is where that event's readers stand (its position, or its own `backfilled_at`),
 *   `child_visibility` the history visibility it was sent under (what its gap's events are shown
 *   under, as they were sent before it).
 * - `events_by_redacts`: redactions by target, for a redaction stored before its target arrives.
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('events').addColumn('gap_before', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('events').addColumn('backfilled_at', 'bigint').execute();
  await db.schema
    .createTable('backward_extremities')
    .addColumn('room_id', 'text', (c) => c.notNull())
    .addColumn('event_id', 'text', (c) => c.notNull())
    .addColumn('child_depth', 'bigint', (c) => c.notNull())
    .addColumn('child_stream', 'bigint', (c) => c.notNull())
    .addColumn('child_visibility', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('backward_extremities_pkey', ['room_id', 'event_id'])
    .execute();
  await db.schema.createIndex('backward_extremities_by_event').on('backward_extremities').column('event_id').execute();
  // A redaction can arrive before its target (the target in a gap): backfill looks it up by target.
  await db.schema.createIndex('events_by_redacts').on('events').column('redacts').where(sql.ref('redacts'), 'is not', null).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('events_by_redacts').execute();
  await db.schema.dropTable('backward_extremities').execute();
  await db.schema.alterTable('events').dropColumn('backfilled_at').execute();
  await db.schema.alterTable('events').dropColumn('gap_before').execute();
}
