/**
 * Every migration, in order. Imported statically (not read from the directory at run time) so the
 * same list works from the TypeScript sources under vitest and from the compiled build.
 */
import type { Migration } from 'kysely';
import * as accounts from './0001-accounts.js';
import * as rooms from './0002-rooms.js';
import * as bridge from './0003-bridge.js';
import * as media from './0004-media.js';
import * as webhookSecrets from './0005-webhook-secrets.js';
import * as bridgeCommands from './0006-bridge-commands.js';
import * as pdus from './0007-pdus.js';
import * as federation from './0008-federation.js';
import * as remoteMemberships from './0009-remote-memberships.js';
import * as remoteMedia from './0010-remote-media.js';
import * as eventsTopological from './0011-events-topological.js';
import * as stateResets from './0012-state-resets.js';
import * as serverMeta from './0013-server-meta.js';
import * as deviceInbox from './0014-device-inbox.js';
import * as eventRelations from './0015-event-relations.js';
import * as eventsByTime from './0016-events-by-time.js';
import * as presence from './0017-presence.js';
import * as push from './0018-push.js';
import * as eventSearch from './0019-event-search.js';
import * as appservices from './0020-appservices.js';
import * as e2eKeys from './0021-e2e-keys.js';
import * as keyBackup from './0022-key-backup.js';
import * as crossSigning from './0023-cross-signing.js';
import * as cluster from './0024-cluster.js';
import * as timelineGaps from './0025-timeline-gaps.js';
import * as remoteMediaAccess from './0026-remote-media-access.js';
import * as deviceInboxBySender from './0027-device-inbox-by-sender.js';
import * as botPortal from './0029-bot-portal.js';
import * as portalIdentities from './0030-portal-identities.js';
import * as bridgeCrypto from './0031-bridge-crypto.js';
import * as deviceSeenAndKeyListings from './0032-device-seen-and-key-listings.js';
import * as eventsRowid from './0033-events-rowid.js';
import * as guestAccounts from './0035-guest-accounts.js';
import * as pusherDelivery from './0036-pusher-delivery.js';
import * as deviceListStreamIds from './0037-device-list-stream-ids.js';
import * as erasedUsers from './0038-erased-users.js';
import * as deviceListToldUser from './0040-device-list-told-user.js';
import * as deviceListChangesByUser from './0041-device-list-changes-by-user.js';

export const migrations: Record<string, Migration> = {
  '0001-accounts': accounts,
  '0002-rooms': rooms,
  '0003-bridge': bridge,
  '0004-media': media,
  '0005-webhook-secrets': webhookSecrets,
  '0006-bridge-commands': bridgeCommands,
  '0007-pdus': pdus,
  '0008-federation': federation,
  '0009-remote-memberships': remoteMemberships,
  '0010-remote-media': remoteMedia,
  '0011-events-topological': eventsTopological,
  '0012-state-resets': stateResets,
  '0013-server-meta': serverMeta,
  '0014-device-inbox': deviceInbox,
  '0015-event-relations': eventRelations,
  '0016-events-by-time': eventsByTime,
  '0017-presence': presence,
  '0018-push': push,
  '0019-event-search': eventSearch,
  '0020-appservices': appservices,
  '0021-e2e-keys': e2eKeys,
  '0022-key-backup': keyBackup,
  '0023-cross-signing': crossSigning,
  '0024-cluster': cluster,
  '0025-timeline-gaps': timelineGaps,
  '0026-remote-media-access': remoteMediaAccess,
  '0027-device-inbox-by-sender': deviceInboxBySender,
  '0029-bot-portal': botPortal,
  '0030-portal-identities': portalIdentities,
  '0031-bridge-crypto': bridgeCrypto,
  '0032-device-seen-and-key-listings': deviceSeenAndKeyListings,
  '0033-events-rowid': eventsRowid,
  '0035-guest-accounts': guestAccounts,
  '0036-pusher-delivery': pusherDelivery,
  '0037-device-list-stream-ids': deviceListStreamIds,
  '0038-erased-users': erasedUsers,
  '0040-device-list-told-user': deviceListToldUser,
  '0041-device-list-changes-by-user': deviceListChangesByUser,
};
