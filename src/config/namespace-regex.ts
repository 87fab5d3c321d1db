/**
 * Appservice namespace regexes are the operator's, but anyone can make us match them: a user id
 * asked for at `/register/available` needs no account. JavaScript's engine backtracks, so a
 * pattern such as `@(a+)+b:hs\.test` took 12 s for 32 characters and tripled with every two
 * more, holding the event loop. Such patterns are refused when a registration is read.
 *
 * The check is `safe-regex2` (fastify's, already what find-my-way uses to refuse route regexes):
 * it refuses a repetition inside a repetition (`(a+)+`, `(a*)*`, `(\w+\s?)*`), the usual shape of
 * an exponential pattern, and more than 25 repetitions in one pattern. It is a heuristic: it does
 * not see overlapping alternatives under one repetition (`(a|a)+b`), which docs/appservices.md
 * warns about. Only ids the spec allows are matched (255 bytes, `MAX_MATCHED_LENGTH`), which bounds
 * the polynomial cases (`.*_.*:x`).
 */
import safeRegex from 'safe-regex2';

/** The longest id worth matching: the spec caps user ids, room ids and aliases at 255 bytes. */
export const MAX_MATCHED_LENGTH = 255;

/**
 * Compiles a namespace regex as Synapse's `re.match` applies it (anchored at the start), or
 * throws an Error saying why it cannot be used.
 */
export function compileNamespaceRegex(regex: string): RegExp {
  let pattern: RegExp;
  try {
    pattern = new RegExp(`^(?:${regex})`, 'u');
  } catch (err) {
    throw new Error(`is not a regular expression this server can use: ${(err as Error).message}`);
  }
  if (!safeRegex(regex)) {
    throw new Error(
      `${JSON.stringify(regex)} could take exponential time to match (a repetition inside a repetition such as (a+)+, more than 25 repetitions, or syntax the check cannot read); write it without nesting, e.g. @prefix_.*:example\\.org`,
    );
  }
  return pattern;
}
