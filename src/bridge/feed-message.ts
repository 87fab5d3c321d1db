/** How a feed item, and news about a feed, read in a room. Pure functions of their inputs. */
import type { JsonObject } from '../rooms/events.js';
import type { FeedItem } from './feeds/parse-feed.js';
import { cutText, escapeHtml } from './matrix-html.js';

const MAX_TITLE_BYTES = 600;
const MAX_SUMMARY_BYTES = 1_200;

export function feedItemMessage(feedName: string, item: FeedItem): JsonObject {
  // Untitled items (micro-posts) are named by the start of their text.
  const title = item.title?.trim() || (item.summaryText ? cutText(item.summaryText, 160, '…') : 'New item');
  const shortTitle = cutText(title, MAX_TITLE_BYTES, '…');
  const lines = [`${feedName}: ${shortTitle}`];
  if (item.link) lines.push(item.link);
  const showSummary = item.summaryText !== undefined && item.summaryText !== '' && item.title?.trim();
  if (showSummary) lines.push(cutText(item.summaryText!, MAX_SUMMARY_BYTES, '…'));

  const titleHtml = item.link ? `<a href="${escapeHtml(item.link)}">${escapeHtml(shortTitle)}</a>` : escapeHtml(shortTitle);
  let html = `<strong>${escapeHtml(feedName)}</strong>: ${titleHtml}`;
  if (showSummary) html += item.summaryHtml ? `<br>${item.summaryHtml}` : `<br>${escapeHtml(cutText(item.summaryText!, MAX_SUMMARY_BYTES, '…'))}`;
  return { msgtype: 'm.notice', body: lines.join('\n'), format: 'org.matrix.custom.html', formatted_body: html };
}

export function moreItemsMessage(feedName: string, count: number, siteLink: string | undefined): JsonObject {
  const noun = count === 1 ? 'item' : 'items';
  const body = `${feedName}: ${count} more new ${noun} not shown${siteLink ? ` (see ${siteLink})` : ''}.`;
  const where = siteLink ? ` (see <a href="${escapeHtml(siteLink)}">${escapeHtml(siteLink)}</a>)` : '';
  return { msgtype: 'm.notice', body, format: 'org.matrix.custom.html', formatted_body: `<strong>${escapeHtml(feedName)}</strong>: ${count} more new ${noun} not shown${where}.` };
}
