/**
 * The shared corpus of real webhook bodies (`test/fixtures/webhooks/`, see its SOURCES.md), with the
 * headers each sender sends and the facts a person reading the room must be told.
 */
import { readFileSync } from 'node:fs';

export const WEBHOOK_FIXTURES_DIR = new URL('../fixtures/webhooks/', import.meta.url);

const github = (event: string) => ({ 'x-github-event': event, 'user-agent': 'GitHub-Hookshot/0d1c6f6', 'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958' });
const gitlab = (event: string) => ({ 'x-gitlab-event': event, 'user-agent': 'GitLab/17.5.0', 'x-gitlab-instance': 'https://gitlab.com' });
const gitea = (event: string, type = event) => ({
  'x-gitea-event': event,
  'x-gitea-event-type': type,
  'x-gogs-event': event,
  'x-github-event': event,
  'x-github-event-type': type,
  'user-agent': 'Go-http-client/1.1',
});
const forgejo = (event: string, type = event) => ({ ...gitea(event, type), 'x-forgejo-event': event, 'x-forgejo-event-type': type });

export interface WebhookFixture {
  file: string;
  headers: Record<string, string>;
  sender: string;
  /** Facts the plain body must state. */
  says: string[];
  /** What it must never say. */
  never?: string[];
  /** Fragments the HTML must contain (links, escaping). */
  html?: string[];
}

export const WEBHOOK_FIXTURES: WebhookFixture[] = [
  {
    file: 'github-push.json',
    headers: github('push'),
    sender: 'github',
    says: ['6543 pushed 1 commit to main of woodpecker-ci/woodpecker', 'Fix multiline secrets replacer (#700)', 'https://github.com/woodpecker-ci/woodpecker/compare/2f780193b136...366701fde727'],
    html: ['href="https://github.com/woodpecker-ci/woodpecker/compare/2f780193b136...366701fde727"', '<code>main</code>'],
  },
  { file: 'github-push-tag-deleted.json', headers: github('push'), sender: 'github', says: ['Codertocat deleted tag simple-tag of Codertocat/Hello-World'], never: ['0 commits', 'pushed'] },
  {
    file: 'github-pull_request-opened.json',
    headers: github('pull_request'),
    sender: 'github',
    says: ['Codertocat opened pull request #2 in Codertocat/Hello-World', 'Update the README with new information', 'https://github.com/Codertocat/Hello-World/pull/2'],
    html: ['href="https://github.com/Codertocat/Hello-World/pull/2"'],
  },
  { file: 'github-pull_request-closed-merged.json', headers: github('pull_request'), sender: 'github', says: ['anbraten merged pull request #62 in anbraten/test-ready-release-go', 'Change file'] },
  {
    file: 'github-pull_request-closed-unmerged.json',
    headers: github('pull_request'),
    sender: 'github',
    says: ['Codertocat closed pull request #2 in Codertocat/Hello-World', 'without merging'],
    never: ['merged pull request'],
  },
  {
    file: 'github-issues-opened.json',
    headers: github('issues'),
    sender: 'github',
    says: ['Codertocat opened issue #1 in Codertocat/Hello-World', 'Spelling error in the README file', 'https://github.com/Codertocat/Hello-World/issues/1'],
  },
  {
    file: 'github-release-published.json',
    headers: github('release'),
    sender: 'github',
    says: ['Codertocat published release 0.0.1 of Codertocat/Hello-World', 'https://github.com/Codertocat/Hello-World/releases/tag/0.0.1'],
  },
  {
    file: 'github-workflow_run-completed.json',
    headers: github('workflow_run'),
    sender: 'github',
    says: ['✅', 'test', 'succeeded', 'master', 'octo-org/octo-repo', 'https://github.com/octo-org/octo-repo/actions/runs/289782451'],
    never: ['❌', 'failed'],
  },
  { file: 'github-check_suite-completed.json', headers: github('check_suite'), sender: 'github', says: ['✅', 'octocoders-linter', 'succeeded', 'changes', 'ec26c3e', 'Codertocat/Hello-World'] },
  { file: 'github-ping.json', headers: github('ping'), sender: 'github', says: ['Octocoders/Hello-World', 'connected'] },
  {
    file: 'gitlab-push-9-commits.json',
    headers: gitlab('Push Hook'),
    sender: 'gitlab',
    says: ['Shreyas Papinwar pushed 9 commits to test of testing/packit/hello-there', "Merge branch 'master' into 'test'"],
    html: ['/-/compare/'],
  },
  { file: 'gitlab-tag_push.json', headers: gitlab('Tag Push Hook'), sender: 'gitlab', says: ['Maja Massarini pushed tag v1.32 to fedora/src/python-teamcity-messages'], never: ['0 commits'] },
  {
    file: 'gitlab-merge_request-opened.json',
    headers: gitlab('Merge Request Hook'),
    sender: 'gitlab',
    says: ['real6543 opened merge request !3 in demoaccount2-commits-group/test_ci_tmp', 'Edit README.md for more text to read'],
  },
  { file: 'gitlab-merge_request-merged.json', headers: gitlab('Merge Request Hook'), sender: 'gitlab', says: ['anbraten merged merge request !4 in anbraten/woodpecker-test', 'Add new file'] },
  {
    file: 'gitlab-pipeline-failed.json',
    headers: gitlab('Pipeline Hook'),
    sender: 'gitlab',
    says: ['❌', 'Pipeline #384095584 failed', '9-c9s-src-5', 'redhat/centos-stream/rpms/luksmeta', 'check-gitbz'],
    never: ['✅'],
    html: ['/-/pipelines/384095584'],
  },
  { file: 'gitlab-note-merge_request.json', headers: gitlab('Note Hook'), sender: 'gitlab', says: ['shreyaspapi commented on merge request !2 in testing/packit/hello-there', 'must be reopened'] },
  {
    file: 'gitea-push-3-commits.json',
    headers: gitea('push'),
    sender: 'gitea',
    says: ['test-user pushed 3 commits to main of Test-CI/multi-line-secrets', 'add some text'],
  },
  {
    file: 'gitea-pull_request-merged.json',
    headers: gitea('pull_request'),
    sender: 'gitea',
    says: ['anbraten merged pull request #1 in anbraten/test-repo', 'Adjust file', 'https://gitea.com/anbraten/test-repo/pulls/1'],
  },
  { file: 'gitea-release-published.json', headers: gitea('release'), sender: 'gitea', says: ['anbraten published release', 'Version 0.0.5', '0.0.5', 'anbraten/demo'] },
  { file: 'forgejo-push.json', headers: forgejo('push'), sender: 'forgejo', says: ['zlopez pushed 1 commit to main of infra/docs', 'copr: update Pulp team slack handle'] },
  {
    file: 'forgejo-pull_request-synchronized.json',
    headers: forgejo('pull_request', 'pull_request_sync'),
    sender: 'forgejo',
    says: ['jpodivin', 'pull request #3501', 'infra/ansible', 'Derive Log Detective credentials from securely stored values'],
  },
  {
    file: 'alertmanager-firing-2-alerts.json',
    headers: { 'user-agent': 'Alertmanager/0.21.0' },
    sender: 'alertmanager',
    says: ['FIRING', 'High CPU Temperature', 'critical', 'andromeda', 'CPU core temperature is 34.75C', 'CPU core temperature is 17.625C'],
  },
  { file: 'alertmanager-resolved.json', headers: { 'user-agent': 'Alertmanager/0.21.0' }, sender: 'alertmanager', says: ['RESOLVED', 'High CPU Temperature', 'andromeda'], never: ['FIRING'] },
  { file: 'grafana-alert-firing.json', headers: { 'user-agent': 'Grafana' }, sender: 'grafana', says: ['FIRING', 'Memory (copy)', 'High memory usage'] },
  { file: 'grafana-alert-resolved.json', headers: { 'user-agent': 'Grafana' }, sender: 'grafana', says: ['RESOLVED', 'Load avg 15m too high', '15m load average too high'], never: ['FIRING'] },
  {
    file: 'sentry-event_alert-triggered.json',
    headers: { 'sentry-hook-resource': 'event_alert' },
    sender: 'sentry',
    says: ['Send a webhook payload to Webhook.site', 'A simple message-based issue.'],
  },
  {
    file: 'sentry-issue-created.json',
    headers: { 'sentry-hook-resource': 'issue' },
    sender: 'sentry',
    says: ['Exception: Custom exception!', '<module>'],
    html: ['module'],
  },
  {
    file: 'slack-blocks.json',
    headers: {},
    sender: 'slack',
    says: ['Danny Torrence left the following review for your property', 'Overlook Hotel', '⭐'],
    never: [':star:', '<https://google.com|'],
    html: ['href="https://google.com"'],
  },
  {
    file: 'slack-attachments-alertmanager.json',
    headers: { 'user-agent': 'Alertmanager/0.27.0' },
    sender: 'slack',
    says: ['[FIRING:2] InstanceDown for api-server', 'Runbook'],
    never: ['null', ':notebook:'],
    html: ['href="https://alertmanager.local//#/alerts?receiver=default"', 'href="https://runbook.local/1"'],
  },
  {
    file: 'teams-messagecard-gitlab-push.json',
    headers: { 'user-agent': 'GitLab/17.5.0' },
    sender: 'teams',
    says: ['John Doe pushed to branch master', 'John Doe / test', '3517b06c'],
    never: ['](https://'],
    html: ['href="https://gitlab.com/jdoe/test/commits/master"'],
  },
  {
    file: 'text-gitlab-googlechat-push.json',
    headers: { 'user-agent': 'GitLab/17.5.0' },
    sender: 'text',
    says: ['John Doe pushed to branch master', 'Compare changes'],
    never: ['<https://'],
    html: ['href="https://gitlab.com/jdoe/test/commits/master"', 'href="https://gitlab.com/jdoe/test/-/commit/3517b06c64c9d349e2213650d6c009db0471361e"'],
  },
  {
    file: 'unknown-dockerhub-push.json',
    headers: { 'user-agent': 'Go-http-client/1.1' },
    sender: 'unknown',
    says: ['Webhook received', 'callback_url', 'push_data'],
    html: ['<pre>'],
  },
];

export function readFixture(file: string): string {
  return readFileSync(new URL(file, WEBHOOK_FIXTURES_DIR), 'utf8');
}
