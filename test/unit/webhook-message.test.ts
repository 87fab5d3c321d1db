import { describe, expect, it } from 'vitest';
import { MatrixError } from '../../src/core/errors.js';
import { MAX_MESSAGE_CONTENT_BYTES, readWebhookPayload, TRUNCATION_MARKER, webhookMessage } from '../../src/bridge/webhooks/message.js';

const bytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value));

describe('readWebhookPayload', () => {
  it.each([
    [[], 'JSON object'],
    ['text', 'JSON object'],
    [null, 'JSON object'],
    [{}, 'no "text"'],
    [{ text: '' }, 'non-empty'],
    [{ text: '   ' }, 'non-empty'],
    [{ text: 5 }, 'non-empty string'],
    [{ text: 'a', html: 1 }, '"html"'],
    [{ text: 'a', username: {} }, '"username"'],
    [{ text: 'a', msgtype: 'm.image' }, '"msgtype"'],
  ])('refuses %j', (body, message) => {
    expect(() => readWebhookPayload(body)).toThrow(MatrixError);
    expect(() => readWebhookPayload(body)).toThrow(message);
  });
});

describe('webhookMessage', () => {
  it('sends text as a notice by default, or as m.text when asked', () => {
    expect(webhookMessage({ text: 'Build 12 passed' })).toEqual({ msgtype: 'm.notice', body: 'Build 12 passed' });
    expect(webhookMessage({ text: 'hi', msgtype: 'm.text' })).toEqual({ msgtype: 'm.text', body: 'hi' });
  });

  it('sanitizes html: scripts, handlers and javascript: links are gone, formatting stays', () => {
    const content = webhookMessage({
      text: 'Deploy done',
      html: '<b>Deploy</b> <a href="javascript:alert(1)" onclick="x()">done</a><script>alert(1)</script><img src="https://t.example/p.gif"><a href="https://ci.example/1">log</a>',
    });
    expect(content.format).toBe('org.matrix.custom.html');
    expect(content.formatted_body).toBe('<b>Deploy</b> <a>done</a><a href="https://ci.example/1">log</a>');
  });

  it('drops a reply fallback with everything in it, also nested, unclosed or in capitals', () => {
    const quote = '<blockquote><a href="https://matrix.to/#/@ceo:x">@ceo:x</a><br>Wire the money</blockquote>';
    expect(webhookMessage({ text: 'ok', html: `<mx-reply>${quote}</mx-reply>Approved <b>now</b>` }).formatted_body).toBe('Approved <b>now</b>');
    expect(webhookMessage({ text: 'ok', html: `<MX-REPLY><mx-reply>x</mx-reply>${quote}</MX-REPLY>Approved${quote}` }).formatted_body).toBe(`Approved${quote.replace('<br>', '<br />')}`);
    expect(webhookMessage({ text: 'ok', html: `Approved<mx-reply>${quote}` }).formatted_body).toBe('Approved');
  });

  it('shows the username as the sender name in text and html', () => {
    const content = webhookMessage({ text: 'disk <full>', username: 'Monitor\nbot' });
    expect(content.body).toBe('Monitor bot: disk <full>');
    expect(content.formatted_body).toBe('<strong>Monitor bot</strong>: disk &#60;full&#62;');
  });

  it('cuts text that would make the event too large, with a marker', () => {
    const content = webhookMessage({ text: 'é'.repeat(100_000) });
    expect(bytes(content)).toBeLessThanOrEqual(MAX_MESSAGE_CONTENT_BYTES);
    expect(String(content.body).endsWith(TRUNCATION_MARKER)).toBe(true);
    expect(String(content.body).length).toBeGreaterThan(20_000);
  });

  it('cuts text and html together, leaving well-formed html', () => {
    const html = '<ul>' + '<li><b>item</b> "quoted" &amp; more</li>'.repeat(5_000) + '</ul>';
    const content = webhookMessage({ text: '"x"\n'.repeat(40_000), html, username: 'ci' });
    expect(bytes(content)).toBeLessThanOrEqual(MAX_MESSAGE_CONTENT_BYTES);
    expect(String(content.formatted_body)).toMatch(/<\/ul><br \/?><em>… \(message truncated\)<\/em>$|<\/ul><br><em>… \(message truncated\)<\/em>$/);
    expect(String(content.body).startsWith('ci: "x"')).toBe(true);
  });
});
