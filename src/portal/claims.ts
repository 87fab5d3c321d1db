/**
 * What the provider says about a person (the claims of the ID token, and of the userinfo
 * endpoint when asked for), read the way Synapse reads its `oidc_providers` entries: the
 * localpart and display name templates, and `attribute_requirements`. Pure functions.
 */
import type { AttributeRequirement } from '../config/index.js';
import { localpartProblem, userIdFor } from '../users/user-ids.js';

export type Claims = Readonly<Record<string, unknown>>;

const FILTERS: Record<string, (value: string) => string> = {
  lower: (value) => value.toLowerCase(),
  upper: (value) => value.toUpperCase(),
  trim: (value) => value.trim(),
  // Synapse's filter: what comes before the @ of an e-mail address.
  localpart_from_email: (value) => (value.includes('@') ? value.slice(0, value.lastIndexOf('@')) : value),
};

const EXPRESSION = /\{\{\s*([^}]*?)\s*\}\}/g;
const PATH = /^user((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\s*(?:"[^"]*"|'[^']*')\s*\])+)$/;

/**
 * Why a template cannot be used, or null. The subset of Jinja2 that Synapse's examples use:
 * `{{ user.claim }}`, `{{ user["a-claim"] }}`, with filters `lower`, `upper`, `trim`,
 * `localpart_from_email`, around literal text.
 */
export function templateProblem(template: string): string | null {
  if (/\{%|\{#/.test(template)) return 'only {{ user.<claim> }} expressions are understood, not {% %} or {# #} blocks';
  for (const match of template.matchAll(EXPRESSION)) {
    const problem = expressionProblem(match[1] ?? '');
    if (problem) return problem;
  }
  const rest = template.replace(EXPRESSION, '');
  if (rest.includes('{{') || rest.includes('}}')) return 'an expression is not closed';
  return null;
}

function expressionProblem(expression: string): string | null {
  const [path, ...filters] = expression.split('|').map((part) => part.trim());
  if (!path || !PATH.test(path)) return `${JSON.stringify(expression)} is not of the form user.<claim>`;
  for (const filter of filters) if (!(filter in FILTERS)) return `the filter ${JSON.stringify(filter)} is not one of ${Object.keys(FILTERS).join(', ')}`;
  return null;
}

/** Renders a template checked by `templateProblem`; a missing claim renders as nothing, as in Jinja2. */
export function renderTemplate(template: string, claims: Claims): string {
  return template.replace(EXPRESSION, (_whole, expression: string) => {
    const [path = '', ...filters] = expression.split('|').map((part) => part.trim());
    let value = claimAt(claims, path);
    for (const filter of filters) value = FILTERS[filter]?.(value) ?? value;
    return value;
  });
}

function claimAt(claims: Claims, path: string): string {
  const match = PATH.exec(path);
  if (!match) return '';
  const keys = [...(match[1] ?? '').matchAll(/\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:"([^"]*)"|'([^']*)')\s*\]/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? '');
  let value: unknown = claims;
  for (const key of keys) {
    if (value === null || typeof value !== 'object' || Array.isArray(value) || !Object.hasOwn(value, key)) return '';
    value = (value as Record<string, unknown>)[key];
  }
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return '';
}

/**
 * Synapse's check of one requirement: the claim equals the value, or is a list that contains it
 * (`groups`); `one_of`: any of several values.
 */
export function meetsRequirement(claims: Claims, requirement: AttributeRequirement): boolean {
  const wanted = requirement.one_of ?? (requirement.value !== undefined ? [requirement.value] : []);
  if (!Object.hasOwn(claims, requirement.attribute)) return false;
  const actual = claims[requirement.attribute];
  const values = Array.isArray(actual) ? actual : [actual];
  return values.some((value) => typeof value === 'string' && wanted.includes(value));
}

/** Every requirement holds (an empty list always does). */
export function meetsRequirements(claims: Claims, requirements: readonly AttributeRequirement[]): boolean {
  return requirements.every((requirement) => meetsRequirement(claims, requirement));
}

export type PersonIdResult = { ok: true; userId: string } | { ok: false; reason: string };

/** The person's user id on the organisation's homeserver, from the localpart template. */
export function personIdFrom(claims: Claims, localpartTemplate: string, peopleServerName: string): PersonIdResult {
  const localpart = renderTemplate(localpartTemplate, claims).trim().toLowerCase();
  if (localpart.length === 0) return { ok: false, reason: 'your sign-in gave no user name' };
  const problem = localpartProblem(localpart, peopleServerName);
  if (problem) return { ok: false, reason: `your user name from the sign-in (${localpart}) cannot be used: ${problem}` };
  return { ok: true, userId: userIdFor(localpart, peopleServerName) };
}
