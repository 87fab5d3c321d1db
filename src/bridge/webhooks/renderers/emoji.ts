/**
 * `:shortcode:` emoji as Slack (and GitHub) write them, turned into the characters themselves:
 * Matrix clients show text as it is, so `:star:` would otherwise stay a word.
 */
import { gemoji } from 'gemoji';

/** Names Slack knows that gemoji does not. */
const SLACK_ALIASES: Record<string, string> = { simple_smile: '🙂' };

/** Slack's `:skin-tone-2:` … `:skin-tone-6:` are the five Fitzpatrick modifiers, in order. */
const SKIN_TONES = ['🏻', '🏼', '🏽', '🏾', '🏿'];

const SHORTCODE = /:([a-z0-9_+'-]+):(?::skin-tone-([2-6]):)?/;

let byName: Map<string, string> | undefined;

/** Built on first use: most webhooks never need it. */
function emojiByName(): Map<string, string> {
  if (byName === undefined) {
    byName = new Map();
    for (const entry of gemoji) for (const name of entry.names) byName.set(name, entry.emoji);
    for (const [name, emoji] of Object.entries(SLACK_ALIASES)) byName.set(name, emoji);
  }
  return byName;
}

/** The emoji a shortcode name (without colons) stands for, or undefined. */
function emojiFor(name: string): string | undefined {
  return emojiByName().get(name.toLowerCase());
}

/** The text with every known `:shortcode:` replaced; unknown ones stay as written. */
export function replaceEmojiShortcodes(text: string): string {
  if (!text.includes(':')) return text;
  const pattern = new RegExp(SHORTCODE.source, 'gi');
  let out = '';
  let copied = 0;
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) {
    const [whole, name = '', tone] = match;
    const emoji = emojiFor(name);
    if (emoji === undefined) {
      // "10:30:star:": the closing colon of a non-emoji may open the next one.
      pattern.lastIndex = match.index + name.length + 1;
      continue;
    }
    // A skin tone goes straight after the base character, in place of a presentation selector.
    out += text.slice(copied, match.index) + (tone === undefined ? emoji : emoji.replace(/\uFE0F$/, '') + SKIN_TONES[Number(tone) - 2]);
    copied = match.index + whole.length;
  }
  return out + text.slice(copied);
}
