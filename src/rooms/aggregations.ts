/**
 * Bundled aggregations (the spec's "aggregations of child events"): what relates to an event,
 * summed up in its `unsigned["m.relations"]` when the event is served by `/messages`, `/context`,
 * `/event`, `/relations`, `/threads`, `/search` and limited `/sync` timelines, so clients show
 * edits, threads and references without asking for each event's relations.
 * - `m.thread`: the newest reply the reader may see, the number of replies, and whether the
 *   reader took part (sent the root or a reply).
 * - `m.replace`: the newest valid edit (same sender and type, not redacted; newest by the
 *   sender's timestamp, then event id), whole, as Matrix 1.7 defines it; none for a redacted
 *   event, whose edits must not give its content back, nor for an edit itself.
 * - `m.reference`: the ids of the events that reference it.
 * State events get none (as in Synapse).
 */
import { eventFromRow, type ClientEvent, type JsonObject, type StoredEvent, type Viewer } from './events.js';
import { canSeeEvent, type VisibilityContext } from './visibility.js';
import type { Storage } from '../storage/index.js';

const BUNDLED_REL_TYPES = ['m.thread', 'm.replace', 'm.reference'];

/** Edits and references read per batch of events: bounded whatever a room holds. */
const MAX_RELATED_ROWS = 1000;

/** Renders events in client form, without bundles of their own. */
export type RenderEvents = (events: readonly StoredEvent[], viewer: Viewer) => Promise<ClientEvent[]>;

export class RelationBundles {
  constructor(private readonly storage: Storage) {}

  /**
   * `unsigned["m.relations"]` for each of `events` that has something to bundle, by event id.
   * `visibility` undefined: the reader may see every event of the room (joined throughout).
   */
  async of(events: readonly StoredEvent[], viewer: Viewer, visibility: VisibilityContext | undefined, render: RenderEvents): Promise<Map<string, JsonObject>> {
    const parents = new Map(events.filter((event) => event.stateKey === undefined).map((event) => [event.eventId, event]));
    const bundles = new Map<string, JsonObject>();
    if (parents.size === 0) return bundles;
    // Most events have nothing relating to them: one lookup says which do, and of what kind.
    const related = new Map<string, string[]>();
    for (const { eventId, relType } of await this.storage.rooms.relatedTypes([...parents.keys()], BUNDLED_REL_TYPES)) {
      const ids = related.get(relType);
      if (ids) ids.push(eventId);
      else related.set(relType, [eventId]);
    }
    if (related.size === 0) return bundles;
    const visible = (event: StoredEvent): boolean => visibility === undefined || canSeeEvent(event, visibility);
    const bundleOf = (eventId: string): JsonObject => {
      let bundle = bundles.get(eventId);
      if (!bundle) bundles.set(eventId, (bundle = {}));
      return bundle;
    };

    // Events shown whole inside bundles, rendered together.
    const shown: Array<{ parentId: string; key: 'm.thread' | 'm.replace'; event: StoredEvent; summary?: JsonObject }> = [];
    for (const thread of await this.storage.rooms.threadSummaries(related.get('m.thread') ?? [], viewer.userId)) {
      const latest = eventFromRow(thread.latest);
      if (!visible(latest)) continue;
      const root = parents.get(thread.rootId)!;
      shown.push({ parentId: thread.rootId, key: 'm.thread', event: latest, summary: { count: thread.count, current_user_participated: thread.viewerReplied || root.sender === viewer.userId } });
    }
    const editable = (related.get('m.replace') ?? []).filter((id) => {
      const parent = parents.get(id)!;
      return parent.redactedBy === undefined && relTypeOf(parent.content) !== 'm.replace';
    });
    const edited = new Set<string>();
    for (const { relatesTo, event: row } of await this.storage.rooms.replacementsOf(editable, MAX_RELATED_ROWS)) {
      // Newest first: the first visible edit of each event is its replacement.
      if (edited.has(relatesTo)) continue;
      const edit = eventFromRow(row);
      if (!visible(edit)) continue;
      edited.add(relatesTo);
      shown.push({ parentId: relatesTo, key: 'm.replace', event: edit });
    }
    const rendered = shown.length === 0 ? [] : await render(shown.map((entry) => entry.event), viewer);
    shown.forEach((entry, index) => {
      const event = rendered[index] as unknown as JsonObject;
      bundleOf(entry.parentId)[entry.key] = entry.key === 'm.thread' ? { latest_event: event, ...entry.summary } : event;
    });

    for (const { relatesTo, event: row } of await this.storage.rooms.referencesOf(related.get('m.reference') ?? [], MAX_RELATED_ROWS)) {
      const reference = eventFromRow(row);
      if (!visible(reference)) continue;
      const bundle = bundleOf(relatesTo);
      const chunk = ((bundle['m.reference'] as { chunk: JsonObject[] } | undefined) ??= { chunk: [] }).chunk;
      chunk.push({ event_id: reference.eventId });
    }
    return bundles;
  }
}

function relTypeOf(content: JsonObject): unknown {
  const relatesTo = content['m.relates_to'];
  return typeof relatesTo === 'object' && relatesTo !== null ? (relatesTo as JsonObject).rel_type : undefined;
}
