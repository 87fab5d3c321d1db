/** A tagged template for HTML in which every interpolated value is escaped unless marked safe. Pure. */

const SAFE: unique symbol = Symbol('safe html');

export interface SafeHtml {
  readonly [SAFE]: true;
  readonly text: string;
}

export type HtmlValue = SafeHtml | string | number | null | undefined | false | readonly HtmlValue[];

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c);
}

/** Marks text as HTML already (our own markup). Never pass anything a person typed. */
export function trusted(text: string): SafeHtml {
  return { [SAFE]: true, text };
}

function render(value: HtmlValue): string {
  if (value === null || value === undefined || value === false) return '';
  if (Array.isArray(value)) return value.map(render).join('');
  if (typeof value === 'object' && SAFE in value) return value.text;
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0] ?? '';
  for (let i = 0; i < values.length; i++) out += render(values[i]) + (strings[i + 1] ?? '');
  return trusted(out);
}
