/** Percentiles and summaries of latency samples (milliseconds). */
import { round } from './server.mjs';

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** { n, p50, p90, p99, max, mean } in ms, rounded to 0.01 ms. */
export function summarize(samples) {
  const sorted = Float64Array.from(samples).sort();
  const n = sorted.length;
  if (n === 0) return { n: 0, p50: null, p90: null, p99: null, max: null, mean: null };
  let sum = 0;
  for (const x of sorted) sum += x;
  return {
    n,
    p50: round(percentile(sorted, 50)),
    p90: round(percentile(sorted, 90)),
    p99: round(percentile(sorted, 99)),
    max: round(sorted[n - 1]),
    mean: round(sum / n),
  };
}
