/** Synapse-style durations: a number of milliseconds, or a string like "30s", "5m", "1h", "7d". */
const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
  y: 31_536_000_000,
};

export function parseDuration(value: string | number): number {
  if (typeof value === 'number') return value;
  const match = /^([0-9]+)(ms|s|m|h|d|w|y)?$/.exec(value.trim());
  if (!match) throw new Error(`not a duration: ${value}`);
  // Synapse reads a bare number in a duration string as milliseconds.
  return Number(match[1]) * UNIT_MS[match[2] ?? 'ms']!;
}
