#!/usr/bin/env node
/**
 * Renders a bench results file as one SVG: throughput per scenario (with the bare Fastify and
 * bare SQLite references) and latency p50/p90/p99 (and max) per scenario, both on log scales.
 *
 *   node bench/chart.mjs bench/results/<date-time>.json [--out bench/results/latest.svg]
 *
 * Hand-written: two panels of bars and markers are a few dozen SVG elements, and a charting
 * library would bring a DOM or a canvas to Node for them.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const WIDTH = 1000;
const LABEL_W = 390;
const RIGHT_PAD = 70;
const ROW_H = 18;
const PLOT_W = WIDTH - LABEL_W - RIGHT_PAD;
const COLORS = { ours: '#3b6ea5', reference: '#a0a0a0', p50: '#1f4e79', p90: '#5b9bd5', p99: '#c0504d', max: '#999999', grid: '#e4e4e4', text: '#222222' };

/** @param {object} report a results file, parsed */
export function renderChart(report) {
  const rows = report.results;
  const label = (r) => `${r.scenario} · ${r.variant}${['full', 'normal'].includes(r.synchronous) && r.scenario !== 'limits' ? ` (${r.synchronous})` : ''}`;
  const isReference = (r) => r.scenario === 'limits';
  const rateRows = rows.filter((r) => r.rate_per_s > 0 && (['send-throughput', 'webhook', 'limits'].includes(r.scenario)));
  const latencyRows = rows.filter((r) => r.latency_ms?.n > 0);

  const out = [];
  let y = 0;
  const m = report.machine ?? {};
  const title = `bot-homeserver bench (${report.mode}) · ${String(report.started_at ?? '').slice(0, 10)} · commit ${m.git_commit ?? '?'}${m.git_dirty ? '+dirty' : ''} · ${m.cpus ?? '?'}× ${m.cpu_model ?? '?'} · node ${m.node ?? '?'}`;
  out.push(text(10, (y += 22), title, { size: 14, weight: 'bold' }));

  // ---- panel 1: throughput ----
  y += 16;
  out.push(text(10, (y += 16), 'Throughput, operations per second (log scale; grey: bare Fastify and bare SQLite on the same machine)', { size: 12, weight: 'bold' }));
  y += 8;
  if (rateRows.length) {
    const values = rateRows.map((r) => r.rate_per_s);
    const scale = logScale(Math.min(...values) / 2, Math.max(...values) * 1.5);
    const top = y;
    const bottom = top + rateRows.length * ROW_H + 4;
    out.push(...gridLines(scale, top, bottom, ''));
    rateRows.forEach((r, i) => {
      const rowY = top + i * ROW_H + 4;
      const w = Math.max(1, scale.x(r.rate_per_s) - LABEL_W);
      out.push(text(LABEL_W - 8, rowY + 12, label(r), { anchor: 'end' }));
      out.push(`<rect x="${LABEL_W}" y="${rowY + 2}" width="${w.toFixed(1)}" height="${ROW_H - 5}" fill="${isReference(r) ? COLORS.reference : COLORS.ours}"/>`);
      out.push(text(LABEL_W + w + 4, rowY + 12, formatRate(r.rate_per_s)));
    });
    y = bottom + 16;
  } else {
    out.push(text(LABEL_W, (y += 16), 'no throughput results in this file'));
    y += 10;
  }

  // ---- panel 2: latency ----
  y += 14;
  out.push(text(10, (y += 16), 'Latency, milliseconds (log scale)', { size: 12, weight: 'bold' }));
  const legendX = LABEL_W;
  out.push(marker('p50', legendX + 230, y - 4), text(legendX + 238, y, 'p50'));
  out.push(marker('p90', legendX + 275, y - 4), text(legendX + 283, y, 'p90'));
  out.push(marker('p99', legendX + 320, y - 4), text(legendX + 328, y, 'p99'));
  out.push(marker('max', legendX + 365, y - 4), text(legendX + 373, y, 'max'));
  y += 8;
  if (latencyRows.length) {
    const lows = latencyRows.map((r) => r.latency_ms.p50).filter((x) => x > 0);
    const highs = latencyRows.map((r) => r.latency_ms.max ?? r.latency_ms.p99);
    const scale = logScale(Math.min(...lows) / 1.5, Math.max(...highs) * 1.5);
    const top = y;
    const bottom = top + latencyRows.length * ROW_H + 4;
    out.push(...gridLines(scale, top, bottom, ' ms'));
    latencyRows.forEach((r, i) => {
      const rowY = top + i * ROW_H + 4;
      const mid = rowY + ROW_H / 2;
      const l = r.latency_ms;
      out.push(text(LABEL_W - 8, rowY + 12, label(r), { anchor: 'end' }));
      const x = (v) => scale.x(Math.max(v, scale.min));
      out.push(`<line x1="${x(l.p50).toFixed(1)}" y1="${mid}" x2="${x(l.p99).toFixed(1)}" y2="${mid}" stroke="${COLORS.p90}" stroke-width="2"/>`);
      if (l.max !== null && l.max !== undefined) {
        out.push(`<line x1="${x(l.p99).toFixed(1)}" y1="${mid}" x2="${x(l.max).toFixed(1)}" y2="${mid}" stroke="${COLORS.max}" stroke-width="1" stroke-dasharray="2,2"/>`);
        out.push(marker('max', x(l.max), mid));
      }
      out.push(marker('p99', x(l.p99), mid), marker('p90', x(l.p90), mid), marker('p50', x(l.p50), mid));
      out.push(text(Math.min(WIDTH - 4, x(l.max ?? l.p99) + 8), rowY + 12, `${formatMs(l.p50)} / ${formatMs(l.p99)}`, { color: '#666666' }));
    });
    y = bottom + 16;
  }
  y += 10;
  out.push(text(10, y, 'Latency labels: p50 / p99. Setups, sizes and caveats: bench/README.md. Server CPU and RSS per row: the results JSON.', { color: '#666666' }));
  const height = y + 12;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="11">`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    ...out,
    '</svg>',
    '',
  ].join('\n');
}

/** A log10 scale over [min, max] onto the plot's x range, with ticks at 1, 2 and 5 of each decade. */
function logScale(min, max) {
  const lo = Math.floor(Math.log10(min));
  const hi = Math.ceil(Math.log10(max));
  const x = (v) => LABEL_W + ((Math.log10(v) - lo) / (hi - lo)) * PLOT_W;
  const ticks = [];
  for (let d = lo; d <= hi; d++) for (const k of [1, 2, 5]) if (k * 10 ** d <= 10 ** hi) ticks.push({ value: k * 10 ** d, major: k === 1 });
  return { x, ticks, min: 10 ** lo };
}

function gridLines(scale, top, bottom, unit) {
  const out = [];
  for (const t of scale.ticks) {
    const x = scale.x(t.value).toFixed(1);
    out.push(`<line x1="${x}" y1="${top}" x2="${x}" y2="${bottom}" stroke="${COLORS.grid}" stroke-width="${t.major ? 1.2 : 0.6}"/>`);
    if (t.major || scale.ticks.length < 14) out.push(text(Number(x), bottom + 12, `${formatTick(t.value)}${t.major ? unit : ''}`, { anchor: 'middle', color: '#777777', size: 10 }));
  }
  return out;
}

function marker(kind, x, y) {
  const cx = Number(x).toFixed(1);
  switch (kind) {
    case 'p50':
      return `<circle cx="${cx}" cy="${y}" r="4" fill="${COLORS.p50}"/>`;
    case 'p90':
      return `<rect x="${(Number(x) - 3).toFixed(1)}" y="${y - 3}" width="6" height="6" fill="${COLORS.p90}"/>`;
    case 'p99':
      return `<path d="M ${cx} ${y - 5} L ${(Number(x) + 5).toFixed(1)} ${y} L ${cx} ${y + 5} L ${(Number(x) - 5).toFixed(1)} ${y} Z" fill="${COLORS.p99}"/>`;
    default:
      return `<path d="M ${(Number(x) - 3).toFixed(1)} ${y - 3} L ${(Number(x) + 3).toFixed(1)} ${y + 3} M ${(Number(x) - 3).toFixed(1)} ${y + 3} L ${(Number(x) + 3).toFixed(1)} ${y - 3}" stroke="${COLORS.max}" stroke-width="1.5"/>`;
  }
}

function text(x, y, content, { anchor = 'start', size, weight, color = COLORS.text } = {}) {
  const attrs = [`x="${Number(x).toFixed(1)}"`, `y="${y}"`, `fill="${color}"`];
  if (anchor !== 'start') attrs.push(`text-anchor="${anchor}"`);
  if (size) attrs.push(`font-size="${size}"`);
  if (weight) attrs.push(`font-weight="${weight}"`);
  return `<text ${attrs.join(' ')}>${escapeXml(content)}</text>`;
}

const escapeXml = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function formatTick(v) {
  if (v >= 1e6) return `${v / 1e6}M`;
  if (v >= 1e3) return `${v / 1e3}k`;
  return String(Number(v.toPrecision(3)));
}

const formatRate = (v) => `${Math.round(v).toLocaleString('en-US')}/s`;
const formatMs = (v) => (v === null || v === undefined ? '–' : v >= 100 ? `${Math.round(v)}` : v >= 10 ? v.toFixed(1) : v.toFixed(2));

// ---- CLI ----
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { out: { type: 'string' } } });
  if (positionals.length !== 1) {
    console.error('usage: node bench/chart.mjs <results.json> [--out FILE.svg]   (default: bench/results/latest.svg)');
    process.exit(2);
  }
  const report = JSON.parse(readFileSync(positionals[0], 'utf8'));
  const outFile = values.out ?? join(dirname(fileURLToPath(import.meta.url)), 'results', 'latest.svg');
  writeFileSync(outFile, renderChart(report));
  console.error(`wrote ${outFile}`);
}
