/** How a feed item, and news about a feed, read in a room. Pure functions of their inputs. */
import type { JsonObject } from '../../rooms/events.js';
import type { FeedItem } from './parse.js';
import { cutText, escapeHtml, jsonBytes } from '../matrix-html.js';

const MAX_TITLE_BYTES = 600;
const MAX_SUMMARY_BYTES = 1_200;
/** Feed names come from the feed's own title: a hostile or broken feed may make it huge. */
const MAX_NAME_BYTES = 200;
/** Summary HTML is cut by its text; many long links can still make it large, so it is capped whole. */
const MAX_SUMMARY_HTML_BYTES = 4_000;
/** Well under the 64 KiB event limit, whatever the feed sends. */
const MAX_CONTENT_BYTES = 16_000;

export function feedItemMessage(fullFeedName: string, item: FeedItem): JsonObject {
  const feedName = cutText(fullFeedName, MAX_NAME_BYTES, '…');
  // Untitled items (micro-posts) are named by the start of their text.
  const title = item.title?.trim() || (item.summaryText ? cutText(item.summaryText, 160, '…') : 'New item');
  const shortTitle = cutText(title, MAX_TITLE_BYTES, '…');
  const lines = [`${feedName}: ${shortTitle}`];
  if (item.link) lines.push(item.link);
  const showSummary = item.summaryText !== undefined && item.summaryText !== '' && item.title?.trim();
  if (showSummary) lines.push(cutText(item.summaryText!, MAX_SUMMARY_BYTES, '…'));

  const titleHtml = item.link ? `<a href="${escapeHtml(item.link)}">${escapeHtml(shortTitle)}</a>` : escapeHtml(shortTitle);
  let html = `<strong>${escapeHtml(feedName)}</strong>: ${titleHtml}`;
  if (showSummary) {
    const summaryHtml = item.summaryHtml && jsonBytes(item.summaryHtml) <= MAX_SUMMARY_HTML_BYTES ? item.summaryHtml : undefined;
    html += summaryHtml ? `<br>${summaryHtml}` : `<br>${escapeHtml(cutText(item.summaryText!, MAX_SUMMARY_BYTES, '…'))}`;
  }
  const content: JsonObject = { msgtype: 'm.notice', body: lines.join('\n'), format: 'org.matrix.custom.html', formatted_body: html };
  // A link of megabytes, say: the plain text alone still fits, cut.
  if (Buffer.byteLength(JSON.stringify(content)) > MAX_CONTENT_BYTES) {
    return { msgtype: 'm.notice', body: cutText(content.body as string, MAX_CONTENT_BYTES / 2, '…') };
  }
  return content;
}

export function moreItemsMessage(fullFeedName: string, count: number, fullSiteLink: string | undefined): JsonObject {
  const feedName = cutText(fullFeedName, MAX_NAME_BYTES, '…');
  const siteLink = fullSiteLink && fullSiteLink.length <= 2_000 ? fullSiteLink : undefined;
  const noun = count === 1 ? 'item' : 'items';
  const body = `${feedName}: ${count} more new ${noun} not shown${siteLink ? ` (see ${siteLink})` : ''}.`;
  const where = siteLink ? ` (see <a href="${escapeHtml(siteLink)}">${escapeHtml(siteLink)}</a>)` : '';
  return { msgtype: 'm.notice', body, format: 'org.matrix.custom.html', formatted_body: `<strong>${escapeHtml(feedName)}</strong>: ${count} more new ${noun} not shown${where}.` };
}
