// Renderers for monitoring, error-tracking and chat-style senders, against the shared corpus and
// against the odd payloads real senders (and careless scripts) post.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { renderAlertmanager } from '../../src/bridge/webhooks/renderers/alertmanager.js';
import { renderDiscord } from '../../src/bridge/webhooks/renderers/discord.js';
import { replaceEmojiShortcodes } from '../../src/bridge/webhooks/renderers/emoji.js';
import { renderUnknown } from '../../src/bridge/webhooks/renderers/fallback.js';
import { renderGrafana } from '../../src/bridge/webhooks/renderers/grafana.js';
import { renderWebhook, type Sender } from '../../src/bridge/webhooks/renderers/index.js';
import { renderSentry } from '../../src/bridge/webhooks/renderers/sentry.js';
import { renderedMessage } from '../../src/bridge/webhooks/renderers/rich-text.js';
import { renderSlack, slackLinksInText, slackMrkdwn } from '../../src/bridge/webhooks/renderers/slack.js';
import { renderTeams } from '../../src/bridge/webhooks/renderers/teams.js';
import { renderUptimeKuma } from '../../src/bridge/webhooks/renderers/uptime-kuma.js';

const FIXTURES = new URL('../fixtures/webhooks/', import.meta.url);
const JSON_HEADERS = { 'content-type': 'application/json' };

function fixture(name: string): unknown {
  return JSON.parse(readFileSync(new URL(name, FIXTURES), 'utf8'));
}

function render(payload: unknown, headers: Record<string, string> = JSON_HEADERS) {
  const outcome = renderWebhook({ headers, payload });
  if ('skipped' in outcome) throw new Error(`not posted: ${outcome.skipped}`);
  expect(outcome.rendererError).toBeUndefined();
  return { sender: outcome.sender, body: String(outcome.content.body), html: String(outcome.content.formatted_body ?? '') };
}

function renderFixture(name: string, sender: Sender, headers: Record<string, string> = JSON_HEADERS) {
  const message = render(fixture(name), headers);
  expect(message.sender).toBe(sender);
  expect(message.body).not.toMatch(/\bnull\b|undefined|\[object Object\]/);
  return { ...message, firstLine: message.body.split('\n')[0] };
}

describe('Alertmanager', () => {
  it('a firing group of two: status, count, shared name, severity and host, both descriptions; one linked line per alert', () => {
    const { firstLine, body, html } = renderFixture('alertmanager-firing-2-alerts.json', 'alertmanager', { ...JSON_HEADERS, 'user-agent': 'Alertmanager/0.21.0' });
    expect(firstLine).toBe('🔥 FIRING (2) High CPU Temperature [critical] on andromeda: CPU core temperature is 34.75C; CPU core temperature is 17.625C');
    expect(body).toContain('• 🔥 High CPU Temperature: CPU core temperature is 17.625C');
    expect(html).toContain('<a href="http://cobalt:9090/graph?g0.expr=avg+by%28host%29');
    expect(html.match(/<li>/g)).toHaveLength(2);
  });

  it('a resolved group is resolved by its status, although endsAt is the zero time', () => {
    const { firstLine, body } = renderFixture('alertmanager-resolved.json', 'alertmanager');
    expect(firstLine).toBe('✅ RESOLVED High CPU Temperature on andromeda: CPU core temperature is 34.75C');
    expect(body).not.toContain('FIRING');
  });

  it('decides firing or resolved per alert in a mixed group, and names what the alerts do not share', () => {
    const alert = (status: string, instance: string, endsAt: string) => ({
      status,
      labels: { alertname: 'InstanceDown', severity: 'critical', instance },
      annotations: { summary: `${instance} is down` },
      endsAt,
      generatorURL: 'https://prometheus.example/graph?g0.expr=up',
    });
    const { body } = render({
      version: '4',
      groupKey: '{}:{alertname="InstanceDown"}',
      status: 'firing',
      alerts: [alert('firing', 'db-1:9100', '2030-01-01T00:00:00Z'), alert('resolved', 'db-2:9100', '0001-01-01T00:00:00Z')],
    });
    expect(body.split('\n')[0]).toBe('🔥 FIRING (1, 1 resolved) InstanceDown [critical]: db-1:9100 is down');
    expect(body).toContain('• 🔥 InstanceDown on db-1:9100: db-1:9100 is down');
    expect(body).toContain('• ✅ InstanceDown on db-2:9100: db-2:9100 is down');
  });

  it('keeps a storm of 500 alerts to a few lines', () => {
    const alerts = Array.from({ length: 500 }, (_, index) => ({
      status: 'firing',
      labels: { alertname: `Alert${index % 7}`, instance: `host-${index}` },
      annotations: { description: `problem ${index} ${'x'.repeat(300)}` },
    }));
    const { sender, body, html } = render({ version: '4', status: 'firing', alerts, truncatedAlerts: 20 });
    expect(sender).toBe('alertmanager');
    expect(body.split('\n')[0]).toMatch(/^🔥 FIRING \(520\) Alert0, Alert1, Alert2, …: problem 0 x+…; problem 1 x+…; problem 2 x+…; …$/);
    expect(body.split('\n')).toHaveLength(12);
    expect(body).toContain('• … and 510 more');
    expect(body.length).toBeLessThan(6_000);
    expect(html.length).toBeLessThan(8_000);
  });

  it('reads nulls and wrong types without failing', () => {
    const rendered = renderAlertmanager({ headers: {}, payload: { version: '4', status: 5, alerts: [null, 7, { labels: null, annotations: [] }, { status: 'resolved', labels: { alertname: 3 } }] } });
    expect(rendered.summary.text).toMatch(/^🔥 FIRING \(3, 1 resolved\) /);
    expect(renderAlertmanager({ headers: {}, payload: { alerts: [] } }).summary.text).toBe('✅ RESOLVED alerts');
  });
});

describe('Grafana', () => {
  it('unified alerting, firing: its title, the summary, the rule link, values and the dashboard/panel/silence links', () => {
    const { firstLine, body, html } = renderFixture('grafana-alert-firing.json', 'grafana', { ...JSON_HEADERS, 'user-agent': 'Grafana' });
    expect(firstLine).toBe(
      '🔥 [FIRING:1] Memory (copy) device (true): High memory usage https://play.grafana.org/alerting/grafana/dd2f0260-3cfc-4c65-a4c4-f3f632c551f4/view?orgId=1',
    );
    expect(body).toContain('• 🔥 Memory (copy): High memory usage — A=2473545728, B=0, C=1, minute=9');
    expect(html).toContain('<a href="https://play.grafana.org/d/ece9fb32-7f71-4be9-bd94-2f23608ae5b9?orgId=1&amp;viewPanel=2">panel</a>');
    expect(html).toContain('>silence</a>');
    expect(html).toContain('>dashboard</a>');
  });

  it('unified alerting, resolved: URLs without a scheme are not links', () => {
    const { firstLine, body, html } = renderFixture('grafana-alert-resolved.json', 'grafana');
    expect(firstLine).toBe('✅ [RESOLVED] Load avg 15m too high Node alerts (10.108.0.2:9100 node-exporter): 15m load average too high');
    expect(body).toContain('B=18.9821, C=0');
    expect(html).not.toContain('href');
    expect(body).not.toContain('localhost:3000');
  });

  it('the legacy dashboard-alert shape', () => {
    const { sender, body, html } = render({
      title: '[Alerting] Disk usage',
      ruleName: 'Disk usage',
      ruleUrl: 'https://grafana.example/d/abc?panelId=2',
      state: 'alerting',
      message: 'Disk almost full',
      evalMatches: [{ metric: 'sda1', value: 97.123456789, tags: null }, { metric: null, value: null }],
    });
    expect(sender).toBe('grafana');
    expect(body.split('\n')[0]).toBe('🔥 [Alerting] Disk usage: Disk almost full https://grafana.example/d/abc?panelId=2');
    expect(body).toContain('• sda1: 97.1235');
    expect(body).not.toContain('null');
    expect(html).toContain('<a href="https://grafana.example/d/abc?panelId=2">[Alerting] Disk usage</a>');
  });

  it('reads nulls and wrong types without failing', () => {
    expect(renderGrafana({ headers: {}, payload: { alerts: [null, { values: null, valueString: 5 }], orgId: 1, title: null } }).summary.text).toBe('🔥 FIRING 2 alerts');
    expect(renderGrafana({ headers: {}, payload: { ruleName: null, state: null, evalMatches: {} } }).summary.text).toBe('🔥 [alerting] Grafana alert');
  });
});

describe('Sentry', () => {
  const sentryHeaders = (resource: string) => ({ ...JSON_HEADERS, 'sentry-hook-resource': resource, 'request-id': 'a', 'sentry-hook-timestamp': '1588082705' });

  it('an issue alert: rule, event title, level and the event page', () => {
    const { firstLine, html } = renderFixture('sentry-event_alert-triggered.json', 'sentry', sentryHeaders('event_alert'));
    expect(firstLine).toBe(
      '🚨 Sentry alert "Send a webhook payload to Webhook.site": A simple message-based issue. (info) https://sentry.io/organizations/hypro999-personal-organization/issues/1635261062/events/8da63b42375e4d3b803c377fefb062f8/',
    );
    expect(html).toContain('<a href="https://sentry.io/organizations/hypro999-personal-organization/issues/1635261062/events/8da63b42375e4d3b803c377fefb062f8/">');
  });

  it('a new issue: the title and culprit escaped in HTML and intact in text; no link from a null permalink', () => {
    const { firstLine, html } = renderFixture('sentry-issue-created.json', 'sentry', sentryHeaders('issue'));
    expect(firstLine).toBe('New Sentry issue ZULIP-INTEGRATION-TESTING-2 in Zulip Integration Testing: Exception: Custom exception! (error, __main__ in <module>)');
    expect(html).toContain('__main__ in &lt;module&gt;');
    expect(html).not.toContain('<module>');
    expect(html).not.toContain('href');
  });

  it('resolved and assigned by a person, a metric alert, a comment, an unknown resource', () => {
    const issue = { shortId: 'API-7', title: 'TypeError', level: 'error', project: { name: 'API' }, web_url: 'https://sentry.example/issues/7/', url: 'https://sentry.example/api/0/issues/7/' };
    const user = { type: 'user', name: 'Ada' };
    const resolved = render({ action: 'resolved', data: { issue }, actor: user }, sentryHeaders('issue'));
    expect(resolved.body).toBe('Ada resolved Sentry issue API-7 in API: TypeError (error) https://sentry.example/issues/7/');
    const assigned = render({ action: 'assigned', data: { issue: { ...issue, assignedTo: { name: 'Bob' } } }, actor: user }, sentryHeaders('issue'));
    expect(assigned.body).toContain('Ada assigned Sentry issue API-7 to Bob in API: TypeError');
    const metric = render({ action: 'critical', data: { description_title: 'Too many errors', description_text: '1000 events in 10 minutes', web_url: 'https://sentry.example/alerts/1/' } }, sentryHeaders('metric_alert'));
    expect(metric.body).toBe('🔴 Sentry metric alert critical: Too many errors https://sentry.example/alerts/1/\n• 1000 events in 10 minutes');
    const comment = render({ action: 'created', data: { comment: 'Looking <now>', issue_id: 7, project_slug: 'api' }, actor: user }, sentryHeaders('comment'));
    expect(comment.body).toBe('Ada commented on Sentry issue 7 in api\n> Looking <now>');
    expect(comment.html).toContain('<blockquote>Looking &lt;now&gt;</blockquote>');
    expect(render({ action: 'moved' }, sentryHeaders('seer')).body).toBe('Sentry seer moved');
  });

  it('reads nulls and wrong types without failing', () => {
    for (const resource of ['issue', 'event_alert', 'metric_alert', 'error', 'comment', 'installation', 'other']) {
      for (const payload of [null, [], { action: 5, data: null }, { data: { issue: 'x', event: [], error: 1 } }]) {
        const rendered = renderSentry({ headers: { 'sentry-hook-resource': resource }, payload });
        expect(rendered.summary.text).not.toMatch(/null|undefined/);
      }
    }
  });
});

describe('Slack-compatible', () => {
  it('Block Kit: the first line as summary, then the link, emoji, the field as "Label: value"; a button without URL is dropped', () => {
    const { firstLine, body, html } = renderFixture('slack-blocks.json', 'slack');
    expect(firstLine).toBe('Danny Torrence left the following review for your property:');
    expect(body).toContain('Overlook Hotel (https://google.com)\n ⭐\n Doors had too many axe holes');
    expect(body).toContain('Average Rating: 1.0');
    expect(body).not.toContain(':star:');
    expect(body).not.toContain('Reply to review');
    expect(html).toContain('<em>review</em>');
    expect(html).toContain('<a href="https://google.com">Overlook Hotel</a>');
    expect(html).toContain('<strong>Average Rating</strong>: 1.0');
  });

  it("Alertmanager's slack_configs: username, linked title, mrkdwn text; the fallback is not repeated", () => {
    const { firstLine, body, html } = renderFixture('slack-attachments-alertmanager.json', 'slack', { ...JSON_HEADERS, 'user-agent': 'Alertmanager/0.27.0' });
    expect(firstLine).toBe('Alertmanager: [FIRING:2] InstanceDown for api-server (env="prod", severity="critical") https://alertmanager.local//#/alerts?receiver=default');
    expect(body).toContain('📈 Graph (http://generator.local/1)   📓 Runbook (https://runbook.local/1)');
    expect(body).toContain('Alert: api-server down - critical');
    expect(body).not.toContain('prod critical) |');
    expect(html).toContain('<strong>Alertmanager</strong>: <a href="https://alertmanager.local//#/alerts?receiver=default">[FIRING:2] InstanceDown for api-server (env="prod", severity="critical")</a>');
    expect(html).toContain('<strong><a href="http://generator.local/1">Graph</a></strong>');
    expect(html).toContain('<strong>instance:</strong> <code>1.2.3.4:8081</code>');
  });

  it('attachment fields with null titles or values skip the missing part; fallback only for an otherwise empty attachment', () => {
    const { body } = render({
      text: 'Backup report',
      attachments: [
        { fields: [{ title: null, value: 'only a value' }, { title: 'Only a title', value: null }, { title: null, value: null }, { title: 'Size', value: '12 GB', short: true }] },
        { fallback: 'Fallback text', color: 'good' },
        { fallback: 'Never shown', text: 'Shown instead' },
      ],
    });
    expect(body).toBe('Backup report\nonly a value\nOnly a title\nSize: 12 GB\nFallback text\nShown instead');
  });

  it('header, context, divider, actions with URLs, image and rich_text blocks; text is left to notifications', () => {
    const { body, html } = render({
      text: 'notification fallback',
      username: 'Deploy bot',
      blocks: [
        { type: 'header', text: { type: 'plain_text', text: 'Deploy :rocket: finished' } },
        { type: 'context', elements: [{ type: 'mrkdwn', text: 'by <@U123|ada>' }, { type: 'image', image_url: 'https://x.example/a.png' }] },
        { type: 'divider' },
        { type: 'actions', elements: [{ type: 'button', text: { type: 'plain_text', text: 'Open' }, url: 'https://ci.example/run/9' }] },
        { type: 'image', image_url: 'https://x.example/chart.png', alt_text: 'chart' },
        { type: 'rich_text', elements: [{ type: 'rich_text_section', elements: [{ type: 'text', text: 'all ' }, { type: 'text', text: 'green', style: { bold: true } }, { type: 'emoji', name: 'tada' }] }] },
        null,
        { type: 'input' },
      ],
    });
    expect(body.split('\n')).toEqual(['Deploy bot: Deploy 🚀 finished', 'by @ada', '———', 'Open (https://ci.example/run/9)', 'chart (https://x.example/chart.png)', 'all green🎉']);
    expect(html).toContain('<p><strong>Deploy bot</strong>: <strong>Deploy 🚀 finished</strong></p>');
    expect(html).toContain('<hr />');
    expect(html).toContain('all <strong>green</strong>🎉');
    expect(body).not.toContain('notification fallback');
  });

  it('"blocks": null, no text: still a message, never "null"', () => {
    expect(render({ blocks: null, attachments: [], channel: '#x' }).body).toBe('Slack-style message with no text, blocks or attachments');
    const codeOnly = renderSlack({ headers: {}, payload: { blocks: null, text: '```\nlog line\n```', username: 'ci' } });
    expect(renderedMessage(codeOnly).text).toBe('ci:\nlog line');
  });

  it('keeps 10,000 attachments to a bounded message', () => {
    const attachments = Array.from({ length: 10_000 }, (_, index) => ({ title: `Item ${index}`, text: 'y'.repeat(5_000) }));
    const { body, html } = render({ attachments });
    expect(body.split('\n')[0]).toBe('Item 0');
    expect(body.endsWith('… (more not shown)')).toBe(true);
    expect(body.length).toBeLessThan(16_000);
    expect(html.length).toBeLessThan(40_000);
  });
});

describe('slackMrkdwn', () => {
  it.each([
    ['*bold* _italic_ ~struck~ `a*b*c`', 'bold italic struck a*b*c', '<strong>bold</strong> <em>italic</em> <del>struck</del> <code>a*b*c</code>'],
    ['<https://example.org/a?b=1&amp;c=2|the docs>', 'the docs (https://example.org/a?b=1&c=2)', '<a href="https://example.org/a?b=1&#38;c=2">the docs</a>'],
    ['<https://example.org>', 'https://example.org', '<a href="https://example.org">https://example.org</a>'],
    ['<@U123> <@U9|bob> in <#C1|general> <!here> <!subteam^S1|@ops>', '@U123 @bob in #general @here @ops', '@U123 @bob in #general @here @ops'],
    ['1 &lt; 2 &amp;&amp; 3 &gt; 2', '1 < 2 && 3 > 2', '1 &#60; 2 &#38;&#38; 3 &#62; 2'],
    ['a snake_case_name and 2 * 3 * 4', 'a snake_case_name and 2 * 3 * 4', 'a snake_case_name and 2 * 3 * 4'],
    [':white_check_mark: done :no_such_emoji:', '✅ done :no_such_emoji:', '✅ done :no_such_emoji:'],
    ['```\n<b>raw</b> *not bold*\n```', '<b>raw</b> *not bold*', '<pre><code>&#60;b&#62;raw&#60;/b&#62; *not bold*</code></pre>'],
    ['<javascript:alert(1)|click> <mailto:ops@example.org|Ops>', '<javascript:alert(1)|click> Ops (ops@example.org)', '&#60;javascript:alert(1)|click&#62; Ops (ops@example.org)'],
    ['*<https://x.example|bold link>*', 'bold link (https://x.example)', '<strong><a href="https://x.example">bold link</a></strong>'],
  ])('%s', (input, text, html) => {
    expect(slackMrkdwn(input)).toEqual({ text, html });
  });

  it('does not recurse without bound on hostile nesting', () => {
    const rendered = slackMrkdwn('*_~'.repeat(1_000) + 'x' + '~_*'.repeat(1_000));
    expect(rendered.text).toContain('x');
  });
});

describe('slackLinksInText and the {text} path', () => {
  it("GitLab's Google Chat body: links become real links, text shows label and URL", () => {
    const { firstLine, body, html } = renderFixture('text-gitlab-googlechat-push.json', 'text');
    expect(firstLine).toBe(
      'John Doe pushed to branch master (https://gitlab.com/jdoe/test/commits/master) of John Doe / test (https://gitlab.com/jdoe/test) (Compare changes (https://gitlab.com/jdoe/test/compare/b76004b20503d4d506e51a670de095cc063e4707...3517b06c64c9d349e2213650d6c009db0471361e))',
    );
    expect(body).not.toContain('<https');
    expect(html).toContain('<a href="https://gitlab.com/jdoe/test">John Doe / test</a>');
    expect(html).toContain('<a href="https://gitlab.com/jdoe/test/-/commit/3517b06c64c9d349e2213650d6c009db0471361e">3517b06c</a>: Merge branch \'prod\' into \'master\' - John Doe<br />');
  });

  it('converts only links: no other markup, no entities; undefined when there are none', () => {
    expect(slackLinksInText('Build *done* &amp; <b>ok</b>')).toBeUndefined();
    expect(slackLinksInText('see <ftp://x.example|here>')).toBeUndefined();
    expect(slackLinksInText('*Build* <https://ci.example/1|#1> & <mailto:a@example.org|mail>\nnext')).toEqual({
      text: '*Build* #1 (https://ci.example/1) & mail (a@example.org)\nnext',
      html: '*Build* <a href="https://ci.example/1">#1</a> &#38; mail (a@example.org)<br>next',
    });
  });

  it('a {text} body without links stays plain text', () => {
    const outcome = renderWebhook({ headers: {}, payload: { text: 'Deploy *done*' } });
    expect('content' in outcome && outcome.content).toEqual({ msgtype: 'm.notice', body: 'Deploy *done*' });
  });
});

describe('emoji shortcodes', () => {
  it('known codes, Slack aliases and skin tones become emoji; unknown codes stay as written', () => {
    expect(replaceEmojiShortcodes(':+1: :thumbsup: :simple_smile: :wave::skin-tone-3: :nope: 10:30:star:')).toBe('👍 👍 🙂 👋🏼 :nope: 10:30⭐');
  });
});

describe('Teams', () => {
  it("GitLab's MessageCard: the summary sentence, then the card without repeating it", () => {
    const { firstLine, body, html } = renderFixture('teams-messagecard-gitlab-push.json', 'teams', { ...JSON_HEADERS, 'user-agent': 'GitLab/17.0.0' });
    expect(firstLine).toBe('John Doe pushed to branch master of John Doe / test (Compare changes)');
    expect(body).toContain("3517b06c: Merge branch 'prod' into 'master' - John Doe");
    expect(body).toContain("b76004b2: Merge branch 'revert-a827b196' into 'master' - John Doe");
    expect(body.match(/John Doe pushed/g)).toHaveLength(1);
    expect(html).toContain(
      '(<a href="https://gitlab.com/jdoe/test/compare/b76004b20503d4d506e51a670de095cc063e4707...3517b06c64c9d349e2213650d6c009db0471361e">Compare changes</a>)',
    );
    expect(html).toContain('<a href="https://gitlab.com/jdoe/test/-/commit/1f661795b220c5fe352f391eb8de3ac4fcc6fc1d">1f661795</a>');
  });

  it('a MessageCard with facts, bold markdown and actions', () => {
    const { body, html } = render({
      '@type': 'MessageCard',
      themeColor: 'FF0000',
      title: 'Backup **failed**',
      sections: [{ activityTitle: 'nightly', facts: [{ name: 'Host:', value: 'db-1' }, { name: 'Size', value: null }], text: 'see the log' }],
      potentialAction: [{ '@type': 'OpenUri', name: 'Open log', targets: [{ os: 'default', uri: 'https://ci.example/log' }] }],
    });
    expect(body).toBe('Backup failed\nnightly\nHost: db-1\nSize\nsee the log\nOpen log (https://ci.example/log)');
    expect(html).toContain('<p>Backup <strong>failed</strong></p>');
    expect(html).toContain('<a href="https://ci.example/log">Open log</a>');
  });

  it('an Adaptive Card: text blocks, fact set, columns, container and an OpenUrl action', () => {
    const { sender, body, html } = render({
      type: 'message',
      attachments: [
        {
          contentType: 'application/vnd.microsoft.card.adaptive',
          content: {
            type: 'AdaptiveCard',
            body: [
              { type: 'TextBlock', text: 'Release 2.0 deployed', weight: 'Bolder' },
              { type: 'FactSet', facts: [{ title: 'Env', value: 'prod' }, { title: 'By', value: '[Ada](https://people.example/ada)' }] },
              { type: 'ColumnSet', columns: [{ items: [{ type: 'TextBlock', text: 'left' }] }, { items: [{ type: 'Container', items: [{ type: 'TextBlock', text: 'right' }] }] }] },
              { type: 'Image', url: 'javascript:alert(1)', altText: 'not a link' },
            ],
            actions: [
              { type: 'Action.OpenUrl', title: 'Changelog', url: 'https://example.org/changelog' },
              { type: 'Action.Submit', title: 'Ignored' },
            ],
          },
        },
      ],
    });
    expect(sender).toBe('teams');
    expect(body).toBe('Release 2.0 deployed\nEnv: prod\nBy: Ada\nleft\nright\nChangelog (https://example.org/changelog)');
    expect(html).toContain('<p><strong>Release 2.0 deployed</strong></p>');
    expect(html).toContain('<a href="https://people.example/ada">Ada</a>');
    expect(html).toContain('<a href="https://example.org/changelog">Changelog</a>');
  });

  it('reads nulls, wrong types and deep nesting without failing', () => {
    let container: Record<string, unknown> = { type: 'TextBlock', text: 'deep' };
    for (let depth = 0; depth < 1_000; depth += 1) container = { type: 'Container', items: [container] };
    const deep = renderTeams({ headers: {}, payload: { attachments: [{ contentType: 'application/vnd.microsoft.card.adaptive', content: { body: [container] } }] } });
    expect(deep.summary.text).toBe('Teams card with no text');
    expect(renderTeams({ headers: {}, payload: { sections: [null, 3, { facts: null }], summary: null } }).summary.text).toBe('Teams card with no text');
  });
});

describe('Discord', () => {
  it('content, then an embed with author, linked title, description, fields and footer', () => {
    const { sender, body, html } = render({
      username: 'Status',
      content: 'Deploy **finished**',
      embeds: [
        {
          author: { name: 'CI', url: 'https://ci.example' },
          title: 'Run #42',
          url: 'https://ci.example/runs/42',
          description: 'All [tests](https://ci.example/runs/42/tests) passed ~~slowly~~',
          fields: [{ name: 'Duration', value: '3m' }, { name: 'Flaky', value: null }, { value: 'no name' }],
          footer: { text: 'v1.2.3' },
        },
      ],
    });
    expect(sender).toBe('discord');
    expect(body).toBe('Status: Deploy finished\nCI\nRun #42\nAll tests passed slowly\nDuration: 3m\nFlaky\nno name\nv1.2.3');
    expect(html).toContain('<p><strong>Status</strong>: Deploy <strong>finished</strong></p>');
    expect(html).toContain('<strong><a href="https://ci.example/runs/42">Run #42</a></strong>');
    expect(html).toContain('<a href="https://ci.example/runs/42/tests">tests</a>');
    expect(html).toContain('<del>slowly</del>');
  });

  it('an embed-only message leads with the embed title and its URL', () => {
    const rendered = renderDiscord({ headers: {}, payload: { embeds: [{ title: 'Alert', url: 'https://x.example/a', fields: null }, null] } });
    expect(rendered.summary.text).toBe('Alert');
    expect(rendered.url).toBe('https://x.example/a');
  });
});

describe('Uptime Kuma', () => {
  const monitor = { id: 1, name: 'pmwiki', url: 'https://wiki.example.org/', hostname: null, port: null, type: 'http' };
  const heartbeat = (status: number, msg: string) => ({ monitorID: 1, status, time: '2024-05-01 10:00:00', msg, ping: status === 1 ? 87 : null, important: true, duration: 60, timezone: 'Europe/Berlin', localDateTime: '2024-05-01 12:00:00' });

  it('down', () => {
    const { sender, body, html } = render({ heartbeat: heartbeat(0, 'Request failed with status code 503'), monitor, msg: '[pmwiki] [🔴 Down] Request failed with status code 503' });
    expect(sender).toBe('uptime-kuma');
    expect(body).toBe('🔴 pmwiki is DOWN: Request failed with status code 503 (https://wiki.example.org/)\n• Checked at 2024-05-01 12:00:00 (Europe/Berlin)');
    expect(html).toContain('(<a href="https://wiki.example.org/">https://wiki.example.org/</a>)');
  });

  it('up, for a monitor without a URL', () => {
    const { body } = render({ heartbeat: heartbeat(1, '200 - OK'), monitor: { ...monitor, type: 'port', url: 'https://', hostname: 'db.example.org', port: 5432 }, msg: '[pmwiki] [✅ Up] 200 - OK' });
    expect(body).toBe('✅ pmwiki is UP: 200 - OK (db.example.org:5432)\n• Checked at 2024-05-01 12:00:00 (Europe/Berlin)\n• Response time: 87 ms');
  });

  it('the Test button: heartbeat and monitor are null', () => {
    expect(render({ heartbeat: null, monitor: null, msg: 'My Webhook Testing' }).body).toBe('🔔 Uptime Kuma: My Webhook Testing');
  });

  it('pending and maintenance, and odd values', () => {
    expect(renderUptimeKuma({ headers: {}, payload: { heartbeat: heartbeat(2, 'timeout'), monitor, msg: '' } }).summary.text).toMatch(/^🟡 pmwiki is PENDING: timeout/);
    expect(renderUptimeKuma({ headers: {}, payload: { heartbeat: { status: 3 }, monitor: null, msg: '[db] [🔧 Maintenance]' } }).summary.text).toBe('🔧 db is under MAINTENANCE');
    expect(renderUptimeKuma({ headers: {}, payload: { heartbeat: { status: 'x' }, monitor: 4, msg: null } }).summary.text).toBe('🔔 Uptime Kuma: notification');
  });
});

describe('unknown JSON', () => {
  it('Docker Hub: the top-level keys and a pretty-printed excerpt, floats as plain numbers', () => {
    const { firstLine, body, html } = renderFixture('unknown-dockerhub-push.json', 'unknown');
    expect(firstLine).toBe('Webhook received (JSON, 3 top-level keys: callback_url, push_data, repository)');
    expect(body).toContain('    "pushed_at": 1417566161,');
    // A glimpse, not the document: at most a dozen lines under the summary.
    expect(body.split('\n').length).toBeLessThanOrEqual(14);
    expect(html).toContain('<pre><code class="language-json">{\n  "callback_url": "https://registry.hub.docker.com/');
  });

  it('an array body', () => {
    const { sender, body } = render([1, 2.5, { a: null }]);
    expect(sender).toBe('unknown');
    expect(body).toBe('Webhook received (JSON array of 3 items)\n[\n  1,\n  2.5,\n  {\n    "a": null\n  }\n]');
  });

  it('nesting 10,000 deep: no stack overflow, a short excerpt', () => {
    const depth = 10_000;
    const deepArray = JSON.parse('['.repeat(depth) + ']'.repeat(depth));
    const deepObject = JSON.parse('{"a":'.repeat(depth) + '1' + '}'.repeat(depth));
    for (const payload of [deepArray, deepObject]) {
      const rendered = renderUnknown({ headers: {}, payload });
      expect(rendered.block!.text.split('\n').length).toBeLessThanOrEqual(20);
      expect(rendered.block!.text).toMatch(/[[{]…[\]}]/);
    }
    expect(render(deepArray).body.split('\n')[0]).toBe('Webhook received (JSON array of 1 item)');
  });

  it('5,000 keys: three named in the summary, the excerpt clipped', () => {
    const payload = Object.fromEntries(Array.from({ length: 5_000 }, (_, index) => [`key_${index}_${'k'.repeat(80)}`, 'v'.repeat(500)]));
    const { body } = render(payload);
    const [summary, ...excerpt] = body.split('\n');
    expect(summary).toMatch(/^Webhook received \(JSON, 5000 top-level keys: key_0_k+…, key_1_k+…, key_2_k+…, …\)$/);
    expect(summary!.length).toBeLessThan(200);
    expect(excerpt.length).toBeLessThanOrEqual(13);
    expect(excerpt.join('\n').length).toBeLessThanOrEqual(850);
    expect(excerpt.at(-1)).toBe('…');
  });

  it('a mistyped {"text"} says which field is missing, in one short message', () => {
    const { body } = render({ txt: 'deploy finished' });
    expect(body).toBe('Webhook received without a "text" field (it has "txt"; send {"text": "..."})\n{\n  "txt": "deploy finished"\n}');
    expect(render({ Text: 'x', level: 'info' }).body.split('\n')[0]).toBe('Webhook received without a "text" field (it has "Text"; send {"text": "..."})');
    expect(render({ htlm: '<b>x</b>' }).body.split('\n')[0]).toContain('without a "html" field');
    // Not a typo: an unknown sender's JSON keeps its plain summary.
    expect(render({ event: 'push', next: 1 }).body.split('\n')[0]).toBe('Webhook received (JSON, 2 top-level keys: event, next)');
  });

  it('a renderer that is handed a scalar still says what arrived', () => {
    expect(renderUnknown({ headers: {}, payload: 'text' }).summary.text).toBe('Webhook received (JSON string)');
    expect(renderUnknown({ headers: {}, payload: null }).block!.text).toBe('null');
  });
});

describe('every renderer survives junk', () => {
  const junk: unknown[] = [null, 0, 'x', [], {}, { alerts: [null] }, { attachments: [null, 1, { fields: [null] }] }, { blocks: [{ type: 'section', fields: 'x' }] }, { embeds: [[]] }];
  const renderers = [renderAlertmanager, renderGrafana, renderSentry, renderSlack, renderTeams, renderDiscord, renderUptimeKuma, renderUnknown];
  it.each(renderers.map((renderer) => [renderer.name, renderer] as const))('%s', (_name, renderer) => {
    for (const payload of junk) {
      const rendered = renderer({ headers: {}, payload });
      expect(rendered.summary.text).not.toBe('');
      // The fallback names what arrived, and a JSON null is "null".
      if (payload !== null || renderer !== renderUnknown) expect(rendered.summary.text).not.toMatch(/\bnull\b|undefined|NaN|\[object/);
    }
  });
});
