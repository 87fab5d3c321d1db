/** The portal's rules for the user names people choose for their bots. Pure. */
import { compileNamespaceRegex } from '../config/namespace-regex.js';

export interface BotNameRules {
  /** The whole name must match (the config checks it is anchored and safe to run). */
  pattern: string;
  reserved: readonly string[];
}

export class BotNames {
  private readonly pattern: RegExp;
  private readonly reserved: ReadonlySet<string>;

  constructor(private readonly rules: BotNameRules) {
    this.pattern = compileNamespaceRegex(rules.pattern);
    this.reserved = new Set(rules.reserved.map((name) => name.toLowerCase()));
  }

  /** Why `name` cannot be a bot's user name, in words for the person choosing it, or null. */
  problem(name: string): string | null {
    if (name.length === 0) return 'Choose a user name.';
    if (name.length > 64) return 'The user name is too long: at most 64 characters.';
    if (name !== name.toLowerCase()) return 'Use lower-case letters only.';
    if (!this.pattern.test(name)) return `This user name is not allowed here. ${this.describe()}`;
    if (this.reserved.has(name)) return 'This user name is reserved. Choose another one.';
    return null;
  }

  /** The rule in words, as far as it can be said simply; the pattern itself otherwise. */
  describe(): string {
    if (this.rules.pattern === DEFAULT_PATTERN) {
      return 'Use 2 to 63 characters: a lower-case letter first, then lower-case letters, digits, dots, dashes or underscores.';
    }
    return `It must match the pattern ${this.rules.pattern}.`;
  }
}

export const DEFAULT_PATTERN = '^[a-z][a-z0-9._-]{1,62}$';
