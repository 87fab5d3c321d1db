/** The texts the bridge answers with that do not depend on a room's data. */
import { COMMAND_PREFIX } from './commands.js';

export const HELP_LINES = [
  'I turn webhooks (GitHub, GitLab, Gitea, Forgejo, Alertmanager, Grafana, Sentry, Slack-style and plain JSON) and RSS/Atom/JSON feeds into messages in this room. Commands:',
  `${COMMAND_PREFIX} webhook <name>: create a webhook; I send you its URL by direct message.`,
  `${COMMAND_PREFIX} webhook <name> secret: require signed requests (GitHub, GitLab, Gitea, Forgejo, Sentry, Bearer); I send you a new URL and the secret by direct message. "secret <value>" uses a secret the sender made (Sentry's client secret), "secret off" ends the check.`,
  `${COMMAND_PREFIX} webhook list: the webhooks of this room.`,
  `${COMMAND_PREFIX} webhook remove <name>: delete a webhook; its URL stops working at once.`,
  `${COMMAND_PREFIX} feed <url> [label]: follow a feed; new items are posted here.`,
  `${COMMAND_PREFIX} feed list: the feeds this room follows, with their status.`,
  `${COMMAND_PREFIX} feed remove <url>: stop following a feed.`,
  'Managing webhooks and feeds takes the power level needed to change room settings; listing is open to everyone.',
];

export function joinGreeting(bridgePower: number, neededPower: number): string {
  const hello = `Hello! Say "${COMMAND_PREFIX} help" to see what I can do.`;
  return bridgePower >= neededPower
    ? hello
    : `${hello} To act here I need power level ${neededPower} (Moderator); please give me that.`;
}
