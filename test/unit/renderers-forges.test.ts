import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { renderGithub, type GithubFamily } from '../../src/bridge/webhooks/renderers/github.js';
import { renderGitlab } from '../../src/bridge/webhooks/renderers/gitlab.js';
import { renderWebhook, type Sender, type WebhookRequest } from '../../src/bridge/webhooks/renderers/index.js';
import { renderedMessage, type RenderedWebhook } from '../../src/bridge/webhooks/renderers/rich-text.js';
import { isSkipped, type SkippedWebhook } from '../../src/bridge/webhooks/renderers/types.js';

const FIXTURES = new URL('../fixtures/webhooks/', import.meta.url);

function fixture(name: string): Record<string, unknown> {
  return JSON.parse(readFileSync(new URL(name, FIXTURES), 'utf8')) as Record<string, unknown>;
}

// The headers each sender really sends (SOURCES.md), in Node's lower-case form.
const DELIVERY = '1b207496-d58f-4bea-a04f-d1778592875d';
const SIGNATURE = '0e07c097aa4b1c5e1e2cd4f1d0f1f8a3e5b7c9d1e3f5a7b9c1d3e5f7a9b10190';

function githubHeaders(event: string): Record<string, string> {
  return { 'x-github-event': event, 'x-github-delivery': DELIVERY, 'user-agent': 'GitHub-Hookshot/4b2e6d1', 'content-type': 'application/json' };
}

function gitlabHeaders(event: string): Record<string, string> {
  return { 'x-gitlab-event': event, 'user-agent': 'GitLab/17.4.0', 'x-gitlab-instance': 'https://gitlab.com', 'content-type': 'application/json' };
}

function giteaHeaders(event: string, type = event): Record<string, string> {
  return {
    'x-gitea-event': event,
    'x-gitea-event-type': type,
    'x-gitea-delivery': DELIVERY,
    'x-gogs-event': event,
    'x-gogs-event-type': type,
    'x-gogs-delivery': DELIVERY,
    'x-github-event': event,
    'x-github-event-type': type,
    'x-github-delivery': DELIVERY,
    'user-agent': 'Go-http-client/1.1',
    'content-type': 'application/json',
  };
}

function forgejoHeaders(event: string, type = event): Record<string, string> {
  return {
    ...giteaHeaders(event, type),
    'x-forgejo-event': event,
    'x-forgejo-event-type': type,
    'x-forgejo-delivery': DELIVERY,
    'x-forgejo-signature': SIGNATURE,
    'x-gitea-signature': SIGNATURE,
    'x-gogs-signature': SIGNATURE,
    'x-hub-signature': 'sha1=d6530c98a1b2c3d4e5f60718293a4b5c6d7e8f90',
    'x-hub-signature-256': `sha256=${SIGNATURE}`,
  };
}

const FORGE_OF_SENDER: Partial<Record<Sender, GithubFamily>> = { github: 'github', gitea: 'gitea', forgejo: 'forgejo' };

/** Renders through the dispatcher (which detects the sender) and directly; both must say the same. */
function render(headers: Record<string, string>, payload: unknown, sender: Sender) {
  const request: WebhookRequest = { headers, payload };
  const outcome = renderWebhook(request);
  expect(outcome.sender).toBe(sender);
  if ('skipped' in outcome) throw new Error(`not posted: ${outcome.skipped}`);
  expect(outcome.rendererError).toBeUndefined();
  const forge = FORGE_OF_SENDER[sender];
  const rendered = forge === undefined ? renderGitlab(request) : renderGithub(request, forge);
  if (isSkipped(rendered)) throw new Error(`not posted: ${rendered.skipped}`);
  const direct = renderedMessage(rendered);
  const body = outcome.content.body as string;
  expect(body).toBe(direct.text);
  const html = (outcome.content.formatted_body as string | undefined) ?? '';
  return { body, lines: body.split('\n'), first: body.split('\n')[0]!, html };
}

/** What a room would read, or why nothing is posted. */
function textOf(rendered: RenderedWebhook | SkippedWebhook): string {
  return isSkipped(rendered) ? rendered.skipped : renderedMessage(rendered).text;
}

interface FixtureCase {
  file: string;
  headers: Record<string, string>;
  sender: Sender;
  /** What the first line says (SOURCES.md target facts). */
  says: string[];
  /** Pieces of formatted_body: links and <code>. */
  html: string[];
}

const CASES: FixtureCase[] = [
  {
    file: 'github-push.json',
    headers: githubHeaders('push'),
    sender: 'github',
    says: ['6543 pushed 1 commit to main of woodpecker-ci/woodpecker: Fix multiline secrets replacer (#700)', 'https://github.com/woodpecker-ci/woodpecker/compare/2f780193b136...366701fde727'],
    html: [
      '<strong>6543</strong>',
      '<a href="https://github.com/woodpecker-ci/woodpecker/compare/2f780193b136...366701fde727">1 commit</a>',
      '<code>main</code>',
      '<a href="https://github.com/woodpecker-ci/woodpecker">woodpecker-ci/woodpecker</a>',
      '<a href="https://github.com/woodpecker-ci/woodpecker/commit/366701fde727cb7a9e7f21eb88264f59f6f9b89c"><code>366701f</code></a>',
    ],
  },
  {
    file: 'github-push-tag-deleted.json',
    headers: githubHeaders('push'),
    sender: 'github',
    says: ['Codertocat deleted tag simple-tag of Codertocat/Hello-World'],
    html: ['<code>simple-tag</code>', '<a href="https://github.com/Codertocat/Hello-World">Codertocat/Hello-World</a>'],
  },
  {
    file: 'github-pull_request-opened.json',
    headers: githubHeaders('pull_request'),
    sender: 'github',
    says: ['Codertocat opened pull request #2 in Codertocat/Hello-World: Update the README with new information. https://github.com/Codertocat/Hello-World/pull/2'],
    html: ['<a href="https://github.com/Codertocat/Hello-World/pull/2">#2</a>', '<blockquote>This is a pretty simple change'],
  },
  {
    file: 'github-pull_request-closed-merged.json',
    headers: githubHeaders('pull_request'),
    sender: 'github',
    says: ['anbraten merged pull request #62 in anbraten/test-ready-release-go: Change file', 'https://github.com/anbraten/test-ready-release-go/pull/62'],
    html: ['<a href="https://github.com/anbraten/test-ready-release-go/pull/62">#62</a>'],
  },
  {
    file: 'github-pull_request-closed-unmerged.json',
    headers: githubHeaders('pull_request'),
    sender: 'github',
    says: ['Codertocat closed pull request #2 in Codertocat/Hello-World without merging: Update the README with new information.'],
    html: ['<a href="https://github.com/Codertocat/Hello-World/pull/2">#2</a>'],
  },
  {
    file: 'github-issues-opened.json',
    headers: githubHeaders('issues'),
    sender: 'github',
    says: ['Codertocat opened issue #1 in Codertocat/Hello-World: Spelling error in the README file https://github.com/Codertocat/Hello-World/issues/1'],
    html: ['<a href="https://github.com/Codertocat/Hello-World/issues/1">#1</a>'],
  },
  {
    file: 'github-release-published.json',
    headers: githubHeaders('release'),
    sender: 'github',
    says: ['Codertocat published release 0.0.1 of Codertocat/Hello-World https://github.com/Codertocat/Hello-World/releases/tag/0.0.1'],
    html: ['<a href="https://github.com/Codertocat/Hello-World/releases/tag/0.0.1"><code>0.0.1</code></a>'],
  },
  {
    file: 'github-workflow_run-completed.json',
    headers: githubHeaders('workflow_run'),
    sender: 'github',
    says: ['✅ Workflow test succeeded on master in octo-org/octo-repo (ci(action): update actions/setup-node digest to 8c91899) https://github.com/octo-org/octo-repo/actions/runs/289782451'],
    html: ['<a href="https://github.com/octo-org/octo-repo/actions/runs/289782451">test</a>', '<code>master</code>'],
  },
  {
    file: 'github-check_suite-completed.json',
    headers: githubHeaders('check_suite'),
    sender: 'github',
    says: ['✅ octocoders-linter checks succeeded on changes (ec26c3e) in Codertocat/Hello-World'],
    html: ['<code>changes</code>', '<a href="https://github.com/Codertocat/Hello-World/commit/ec26c3e57ca3a959ca5aad62de7213c562f8c821"><code>ec26c3e</code></a>'],
  },
  {
    file: 'github-ping.json',
    headers: githubHeaders('ping'),
    sender: 'github',
    says: ['GitHub webhook for Octocoders/Hello-World is connected (events: *)'],
    html: ['<a href="https://github.com/Octocoders/Hello-World">Octocoders/Hello-World</a>'],
  },
  {
    file: 'gitlab-push-9-commits.json',
    headers: gitlabHeaders('Push Hook'),
    sender: 'gitlab',
    says: [
      "Shreyas Papinwar pushed 9 commits to test of testing/packit/hello-there: Merge branch 'master' into 'test' (and 8 more)",
      'https://gitlab.com/testing/packit/hello-there/-/compare/1f6a716aa7a618a9ffe56970d77177d99d100022...952cfd32c1a9317f4c460dbe4a6bb3ac406c1002',
    ],
    html: ['<code>test</code>', '<a href="https://gitlab.com/testing/packit/hello-there/-/commit/952cfd32c1a9317f4c460dbe4a6bb3ac406c1002"><code>952cfd3</code></a>'],
  },
  {
    file: 'gitlab-tag_push.json',
    headers: gitlabHeaders('Tag Push Hook'),
    sender: 'gitlab',
    says: ['Maja Massarini pushed tag v1.32 to fedora/src/python-teamcity-messages', 'https://gitlab.com/fedora/src/python-teamcity-messages/-/tags/v1.32'],
    html: ['<code>v1.32</code>', '<a href="https://gitlab.com/fedora/src/python-teamcity-messages">fedora/src/python-teamcity-messages</a>'],
  },
  {
    file: 'gitlab-merge_request-opened.json',
    headers: gitlabHeaders('Merge Request Hook'),
    sender: 'gitlab',
    says: ['real6543 opened merge request !3 in demoaccount2-commits-group/test_ci_tmp: Edit README.md for more text to read (real6543-main-patch-42541 → main)'],
    html: ['<a href="https://gitlab.com/demoaccount2-commits-group/test_ci_tmp/-/merge_requests/3">!3</a>', '<code>real6543-main-patch-42541</code>'],
  },
  {
    file: 'gitlab-merge_request-merged.json',
    headers: gitlabHeaders('Merge Request Hook'),
    sender: 'gitlab',
    says: ['anbraten merged merge request !4 in anbraten/woodpecker-test: Add new file (patch-1 → main)', 'https://gitlab.com/anbraten/woodpecker-test/-/merge_requests/4'],
    html: ['<a href="https://gitlab.com/anbraten/woodpecker-test/-/merge_requests/4">!4</a>', '<code>patch-1</code>'],
  },
  {
    file: 'gitlab-pipeline-failed.json',
    headers: gitlabHeaders('Pipeline Hook'),
    sender: 'gitlab',
    says: [
      '❌ Pipeline #384095584 failed on 9-c9s-src-5 of redhat/centos-stream/rpms/luksmeta (MR !4 Testing contribution); failed job: check-gitbz',
      'https://gitlab.com/redhat/centos-stream/rpms/luksmeta/-/pipelines/384095584',
    ],
    html: ['<a href="https://gitlab.com/redhat/centos-stream/rpms/luksmeta/-/pipelines/384095584">Pipeline #384095584</a>', '<code>check-gitbz</code>'],
  },
  {
    file: 'gitlab-note-merge_request.json',
    headers: gitlabHeaders('Note Hook'),
    sender: 'gitlab',
    says: ['shreyaspapi commented on merge request !2 in testing/packit/hello-there', 'https://gitlab.com/testing/packit/hello-there/-/merge_requests/2#note_355648957'],
    html: ['<a href="https://gitlab.com/testing/packit/hello-there/-/merge_requests/2">!2</a>', '<blockquote>must be reopened</blockquote>'],
  },
  {
    file: 'gitea-push-3-commits.json',
    headers: giteaHeaders('push'),
    sender: 'gitea',
    says: [
      'test-user pushed 3 commits to main of Test-CI/multi-line-secrets: add some text (and 2 more)',
      'http://127.0.0.1:3000/Test-CI/multi-line-secrets/compare/6efcf5b7c98f3e7a491675164b7a2e7acac27941...29be01c073851cf0db0c6a466e396b725a670453',
    ],
    html: ['<strong>test-user</strong>', '<code>main</code>', '<code>29be01c</code>'],
  },
  {
    file: 'gitea-pull_request-merged.json',
    headers: giteaHeaders('pull_request'),
    sender: 'gitea',
    says: ['anbraten merged pull request #1 in anbraten/test-repo: Adjust file https://gitea.com/anbraten/test-repo/pulls/1'],
    html: ['<a href="https://gitea.com/anbraten/test-repo/pulls/1">#1</a>'],
  },
  {
    file: 'gitea-release-published.json',
    headers: giteaHeaders('release'),
    sender: 'gitea',
    says: ['anbraten published release Version 0.0.5 (0.0.5) of anbraten/demo https://git.xxx/anbraten/demo/releases/tag/0.0.5'],
    html: ['<a href="https://git.xxx/anbraten/demo/releases/tag/0.0.5">Version 0.0.5</a> (<code>0.0.5</code>)'],
  },
  {
    file: 'forgejo-push.json',
    headers: forgejoHeaders('push'),
    sender: 'forgejo',
    says: ['zlopez pushed 1 commit to main of infra/docs: copr: update Pulp team slack handle https://forge.fedoraproject.org/infra/docs/compare/8848429b'],
    html: ['<code>main</code>', '<a href="https://forge.fedoraproject.org/infra/docs">infra/docs</a>'],
  },
  {
    file: 'forgejo-pull_request-synchronized.json',
    headers: forgejoHeaders('pull_request', 'pull_request_sync'),
    sender: 'forgejo',
    says: ['jpodivin pushed new commits to pull request #3501 in infra/ansible: Derive Log Detective credentials from securely stored values', 'https://forge.fedoraproject.org/infra/ansible/pulls/3501'],
    html: ['<a href="https://forge.fedoraproject.org/infra/ansible/pulls/3501">#3501</a>'],
  },
];

describe('forge renderers on the shared fixtures', () => {
  it.each(CASES)('$file', ({ file, headers, sender, says, html }) => {
    const message = render(headers, fixture(file), sender);
    for (const fact of says) expect(message.first).toContain(fact);
    for (const piece of html) expect(message.html).toContain(piece);
  });

  it('covers all 21 forge fixtures', () => {
    const files = readdirSync(FIXTURES).filter((name) => /^(github|gitlab|gitea|forgejo)-.*\.json$/.test(name));
    expect(files).toHaveLength(21);
    expect(CASES.map((c) => c.file).sort()).toEqual(files.sort());
  });
});

describe('pushes', () => {
  it('says who pushed, not who wrote the commits, and lists commits newest first', () => {
    const message = render(giteaHeaders('push'), fixture('gitea-push-3-commits.json'), 'gitea');
    expect(message.first).not.toContain('6543 pushed');
    expect(message.lines.slice(1)).toEqual(['• 29be01c add some text — 6543', '• 29cd952 rm a a file — 6543', '• 93787b8 add some a files — 6543']);
  });

  it('reads GitHub commits oldest first and lists them newest first', () => {
    const base = fixture('github-push.json');
    const head = base.head_commit as Record<string, unknown>;
    const older = { ...head, id: 'aaaaaaa0000000000000000000000000000000000', message: 'Older change', url: 'https://github.com/woodpecker-ci/woodpecker/commit/aaaaaaa' };
    const message = render(githubHeaders('push'), { ...base, commits: [older, head] }, 'github');
    expect(message.first).toContain('pushed 2 commits to main of woodpecker-ci/woodpecker: Fix multiline secrets replacer (#700) (and 1 more)');
    expect(message.lines.slice(1)).toEqual(['• 366701f Fix multiline secrets replacer (#700) — Philipp', '• aaaaaaa Older change — Philipp']);
  });

  it('never says "0 commits" for a deleted tag', () => {
    const message = render(githubHeaders('push'), fixture('github-push-tag-deleted.json'), 'github');
    expect(message.body).toBe('Codertocat deleted tag simple-tag of Codertocat/Hello-World');
    expect(message.body).not.toMatch(/\b0 commits?\b/);
  });

  it('says a branch was created or deleted', () => {
    const base = fixture('github-push.json');
    const zeros = '0000000000000000000000000000000000000000';
    const created = render(githubHeaders('push'), { ...base, ref: 'refs/heads/feature/x', created: true, before: zeros, commits: [], head_commit: null }, 'github');
    expect(created.first).toMatch(/^6543 created branch feature\/x of woodpecker-ci\/woodpecker/);
    expect(created.body).not.toMatch(/\b0 commits?\b/);
    const deleted = render(githubHeaders('push'), { ...base, ref: 'refs/heads/old', deleted: true, after: zeros, commits: [], head_commit: null }, 'github');
    expect(deleted.body).toBe('6543 deleted branch old of woodpecker-ci/woodpecker');
  });

  it('lists at most five commits and counts the rest', () => {
    const message = render(gitlabHeaders('Push Hook'), fixture('gitlab-push-9-commits.json'), 'gitlab');
    const details = message.lines.slice(1);
    expect(details).toHaveLength(6);
    expect(details[0]).toBe("• 952cfd3 Merge branch 'master' into 'test' — Shreyas Papinwar");
    expect(details[5]).toBe('• … and 4 more');
  });

  it('counts GitLab pushes with total_commits_count, not the capped commits list', () => {
    const base = fixture('gitlab-push-9-commits.json');
    const payload = { ...base, commits: (base.commits as unknown[]).slice(-2), total_commits_count: 30 };
    const message = render(gitlabHeaders('Push Hook'), payload, 'gitlab');
    expect(message.first).toContain('pushed 30 commits to test');
    expect(message.first).toContain('(and 29 more)');
    expect(message.lines.slice(1)).toHaveLength(3);
    expect(message.body).toContain('… and 28 more');
  });

  it('renders a push without its header from the body object_kind', () => {
    const message = render({ 'content-type': 'application/json' }, fixture('gitlab-push-9-commits.json'), 'gitlab');
    expect(message.first).toContain('Shreyas Papinwar pushed 9 commits');
  });
});

describe('pull requests and issues', () => {
  it('says merged only when the pull request was merged', () => {
    const merged = render(githubHeaders('pull_request'), fixture('github-pull_request-closed-merged.json'), 'github');
    expect(merged.first).toContain('merged pull request #62');
    expect(merged.first).not.toContain('without merging');
    const closed = render(githubHeaders('pull_request'), fixture('github-pull_request-closed-unmerged.json'), 'github');
    expect(closed.first).toContain('closed pull request #2');
    expect(closed.first).toContain('without merging');
    expect(closed.first).not.toContain('merged pull request');
  });

  it('escapes HTML in titles', () => {
    const base = fixture('github-pull_request-opened.json');
    const payload = { ...base, pull_request: { ...(base.pull_request as object), title: '<script>alert(1)</script> & <b>bold</b>' } };
    const message = render(githubHeaders('pull_request'), payload, 'github');
    expect(message.first).toContain('<script>alert(1)</script> & <b>bold</b>');
    expect(message.html).not.toContain('<script');
    expect(message.html).not.toContain('<b>');
    expect(message.html).toContain('&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;');
  });

  it('quotes the first paragraph of a new pull request, clipped', () => {
    const base = fixture('github-pull_request-opened.json');
    const payload = { ...base, pull_request: { ...(base.pull_request as object), body: `${'x'.repeat(1000)}\n\nSecond paragraph` } };
    const message = render(githubHeaders('pull_request'), payload, 'github');
    expect(message.body).not.toContain('Second paragraph');
    expect(message.lines[1]!.length).toBeLessThanOrEqual(305);
  });

  it('quotes GitHub issue comments on pull requests, clipped', () => {
    const issue = fixture('github-issues-opened.json');
    const payload = {
      action: 'created',
      issue: { ...(issue.issue as object), pull_request: { url: 'https://api.github.com/repos/Codertocat/Hello-World/pulls/1' } },
      comment: { body: `Looks good.\n${'y'.repeat(2000)}`, html_url: 'https://github.com/Codertocat/Hello-World/pull/1#issuecomment-1' },
      repository: issue.repository,
      sender: issue.sender,
    };
    const message = render(githubHeaders('issue_comment'), payload, 'github');
    expect(message.first).toBe(
      'Codertocat commented on pull request #1 in Codertocat/Hello-World: Spelling error in the README file https://github.com/Codertocat/Hello-World/pull/1#issuecomment-1',
    );
    expect(message.lines[1]).toBe('> Looks good.');
    expect(message.body.length).toBeLessThan(message.first.length + 520);
  });

  it('reads Gitea review and comment events', () => {
    const base = fixture('gitea-pull_request-merged.json');
    const approved = render(giteaHeaders('pull_request_approved', 'pull_request_review_approved'), { ...base, action: 'reviewed', review: { type: 'pull_request_review_approved', content: 'LGTM' } }, 'gitea');
    expect(approved.first).toContain('anbraten approved pull request #1 in anbraten/test-repo: Adjust file');
    expect(approved.lines[1]).toBe('> LGTM');
    const rejected = render(giteaHeaders('pull_request_rejected', 'pull_request_review_rejected'), { ...base, action: 'reviewed', review: { type: 'pull_request_review_rejected', content: 'No' } }, 'gitea');
    expect(rejected.first).toContain('anbraten requested changes on pull request #1');
    const pr = base.pull_request as Record<string, unknown>;
    const comment = {
      action: 'created',
      issue: { number: 1, title: pr.title, html_url: pr.html_url },
      comment: { body: 'Nice', html_url: 'https://gitea.com/anbraten/test-repo/pulls/1#issuecomment-7' },
      is_pull: true,
      repository: base.repository,
      sender: base.sender,
    };
    const commented = render(giteaHeaders('issue_comment', 'pull_request_comment'), comment, 'gitea');
    expect(commented.first).toContain('anbraten commented on pull request #1 in anbraten/test-repo: Adjust file');
    expect(commented.lines[1]).toBe('> Nice');
  });
});

describe('GitLab issues and notes', () => {
  const project = fixture('gitlab-note-merge_request.json').project;
  const user = { name: 'Shreyas Papinwar', username: 'shreyaspapi' };

  it('renders an opened issue with its number, title and description', () => {
    const payload = {
      object_kind: 'issue',
      user,
      project,
      object_attributes: { iid: 7, title: 'Broken build', action: 'open', description: 'It fails.\n\nDetails below.', url: 'https://gitlab.com/testing/packit/hello-there/-/issues/7' },
    };
    const message = render(gitlabHeaders('Issue Hook'), payload, 'gitlab');
    expect(message.first).toBe('shreyaspapi opened issue #7 in testing/packit/hello-there: Broken build https://gitlab.com/testing/packit/hello-there/-/issues/7');
    expect(message.lines.slice(1)).toEqual(['> It fails.']);
  });

  it('renders notes on issues and commits', () => {
    const onIssue = {
      object_kind: 'note',
      user,
      project,
      object_attributes: { noteable_type: 'Issue', note: 'Same here', url: 'https://gitlab.com/testing/packit/hello-there/-/issues/7#note_1' },
      issue: { iid: 7, title: 'Broken build', url: 'https://gitlab.com/testing/packit/hello-there/-/issues/7' },
    };
    expect(render(gitlabHeaders('Note Hook'), onIssue, 'gitlab').body).toBe(
      'shreyaspapi commented on issue #7 in testing/packit/hello-there: Broken build https://gitlab.com/testing/packit/hello-there/-/issues/7#note_1\n> Same here',
    );
    const onCommit = {
      ...onIssue,
      object_attributes: { noteable_type: 'Commit', note: 'Nice', url: 'https://gitlab.com/testing/packit/hello-there/-/commit/45e272a5#note_2' },
      commit: { id: '45e272a57335e4e308f3176df6e9226a9e7805a9', message: 'Update README.md\n', url: 'https://gitlab.com/testing/packit/hello-there/-/commit/45e272a57335e4e308f3176df6e9226a9e7805a9' },
    };
    const message = render(gitlabHeaders('Note Hook'), onCommit, 'gitlab');
    expect(message.first).toContain('shreyaspapi commented on commit 45e272a in testing/packit/hello-there: Update README.md');
    expect(message.html).toContain('<code>45e272a</code>');
  });
});

describe('CI', () => {
  const run = fixture('github-workflow_run-completed.json');
  const withConclusion = (conclusion: string) => ({ ...run, workflow_run: { ...(run.workflow_run as object), conclusion } });

  it('names a workflow run by its workflow when the run name is empty', () => {
    const message = render(githubHeaders('workflow_run'), run, 'github');
    expect(message.first).toMatch(/^✅ Workflow test succeeded/);
  });

  it('says a failed run failed, without a green tick', () => {
    const message = render(githubHeaders('workflow_run'), withConclusion('failure'), 'github');
    expect(message.first).toMatch(/^❌ Workflow test failed on master in octo-org\/octo-repo/);
    expect(message.body).not.toContain('✅');
    expect(message.body).not.toContain('succeeded');
  });

  it.each([
    ['cancelled', '⏹️', 'cancelled'],
    ['timed_out', '⏱️', 'timed out'],
    ['skipped', '⏭️', 'skipped'],
    ['neutral', '⚪', 'neutral'],
    ['action_required', '⚠️', 'action'],
  ])('says a %s run as such', (conclusion, emoji, words) => {
    const message = render(githubHeaders('workflow_run'), withConclusion(conclusion), 'github');
    expect(message.first.startsWith(`${emoji} Workflow test`)).toBe(true);
    expect(message.first).toContain(words);
  });

  it('does not post runs that have not finished, nor the duplicate actions of one release', () => {
    const inProgress = { ...run, action: 'in_progress', workflow_run: { ...(run.workflow_run as object), status: 'in_progress', conclusion: null } };
    const outcome = renderWebhook({ headers: githubHeaders('workflow_run'), payload: inProgress });
    expect(outcome).toEqual({ sender: 'github', skipped: expect.stringContaining('in progress') });
    const release = fixture('github-release-published.json');
    for (const action of ['created', 'released', 'prereleased']) {
      expect(renderWebhook({ headers: githubHeaders('release'), payload: { ...release, action } })).toHaveProperty('skipped');
    }
    expect(renderWebhook({ headers: githubHeaders('release'), payload: release })).toHaveProperty('content');
    const pipeline = fixture('gitlab-pipeline-failed.json');
    const running = { ...pipeline, object_attributes: { ...(pipeline.object_attributes as object), status: 'running' } };
    expect(renderWebhook({ headers: { 'x-gitlab-event': 'Pipeline Hook' }, payload: running })).toHaveProperty('skipped');
  });

  it('renders workflow jobs and check runs with their conclusion', () => {
    const common = { repository: run.repository, sender: run.sender };
    const job = render(
      githubHeaders('workflow_job'),
      { ...common, action: 'completed', workflow_job: { name: 'build', workflow_name: 'CI', status: 'completed', conclusion: 'failure', head_branch: 'main', html_url: 'https://github.com/octo-org/octo-repo/actions/runs/1/job/2' } },
      'github',
    );
    expect(job.first).toBe('❌ Job build of workflow CI failed on main in octo-org/octo-repo https://github.com/octo-org/octo-repo/actions/runs/1/job/2');
    const check = render(
      githubHeaders('check_run'),
      { ...common, action: 'completed', check_run: { name: 'lint', status: 'completed', conclusion: 'success', head_sha: 'ec26c3e57ca3a959ca5aad62de7213c562f8c821', html_url: 'https://github.com/octo-org/octo-repo/runs/3', check_suite: { head_branch: 'main' } } },
      'github',
    );
    expect(check.first).toBe('✅ Check lint succeeded on main (ec26c3e) in octo-org/octo-repo https://github.com/octo-org/octo-repo/runs/3');
  });

  it('shows a failed GitLab pipeline with its failed job and the pipeline URL it built', () => {
    const message = render(gitlabHeaders('Pipeline Hook'), fixture('gitlab-pipeline-failed.json'), 'gitlab');
    expect(message.first).toMatch(/^❌ Pipeline #384095584 failed/);
    expect(message.first).toContain('failed job: check-gitbz');
    expect(message.first).toContain('https://gitlab.com/redhat/centos-stream/rpms/luksmeta/-/pipelines/384095584');
  });

  it('says a successful GitLab pipeline succeeded', () => {
    const base = fixture('gitlab-pipeline-failed.json');
    const payload = { ...base, object_attributes: { ...(base.object_attributes as object), status: 'success' }, builds: [] };
    const message = render(gitlabHeaders('Pipeline Hook'), payload, 'gitlab');
    expect(message.first).toMatch(/^✅ Pipeline #384095584 succeeded on 9-c9s-src-5/);
    expect(message.first).not.toContain('failed');
  });

  it('shows a GitLab job with its status and built job URL', () => {
    const base = fixture('gitlab-pipeline-failed.json');
    const payload = { object_kind: 'build', ref: 'main', tag: false, build_id: 42, build_name: 'unit', build_stage: 'test', build_status: 'failed', user: base.user, project: base.project };
    const message = render(gitlabHeaders('Job Hook'), payload, 'gitlab');
    expect(message.first).toBe('❌ Job unit failed on main of redhat/centos-stream/rpms/luksmeta (stage test) https://gitlab.com/redhat/centos-stream/rpms/luksmeta/-/jobs/42');
  });
});

describe('releases', () => {
  it('uses the tag when the release has no name, and "Name (tag)" when both differ', () => {
    expect(render(githubHeaders('release'), fixture('github-release-published.json'), 'github').first).toContain('published release 0.0.1 of');
    expect(render(giteaHeaders('release'), fixture('gitea-release-published.json'), 'gitea').first).toContain('published release Version 0.0.5 (0.0.5) of');
  });
});

describe('events no handler knows', () => {
  it('gives an unknown GitHub event a generic line with the repository', () => {
    const payload = {
      action: 'created',
      deployment_status: { state: 'success' },
      repository: { full_name: 'octo-org/octo-repo', html_url: 'https://github.com/octo-org/octo-repo' },
      sender: { login: 'octocat' },
    };
    const message = render(githubHeaders('deployment_status'), payload, 'github');
    expect(message.body).toBe('octocat sent a deployment_status event (created) in octo-org/octo-repo https://github.com/octo-org/octo-repo');
    expect(message.html).toContain('<a href="https://github.com/octo-org/octo-repo">octo-org/octo-repo</a>');
  });

  it('gives a GitLab Wiki Page Hook a generic line', () => {
    const payload = {
      object_kind: 'wiki_page',
      user: { name: 'Alice', username: 'alice' },
      project: { path_with_namespace: 'group/project', web_url: 'https://gitlab.com/group/project' },
      object_attributes: { title: 'Home', action: 'update' },
    };
    const message = render(gitlabHeaders('Wiki Page Hook'), payload, 'gitlab');
    expect(message.body).toBe('alice sent a wiki_page event (update) in group/project https://gitlab.com/group/project');
  });

  it('does not throw on an empty push body', () => {
    const message = render(githubHeaders('push'), {}, 'github');
    expect(message.body).toBe('GitHub sent a push event');
  });

  const EVENTS = ['push', 'pull_request', 'issues', 'issue_comment', 'pull_request_review', 'pull_request_review_comment', 'pull_request_approved', 'commit_comment', 'release', 'workflow_run', 'workflow_job', 'check_suite', 'check_run', 'status', 'ping', 'create', 'delete', 'star', 'fork', 'member', 'repository', 'public', 'constructor', '__proto__'];
  const ODD_BODIES: unknown[] = [
    {},
    [],
    'text',
    null,
    { ref: 7, commits: 'no', pusher: [], repository: [], sender: 'x', action: { a: 1 } },
    { pull_request: { number: 'x' }, issue: [], release: { tag_name: {} }, workflow_run: { status: 5 }, hook: { events: 'all' } },
    { ref: 'refs/heads/main', commits: [null, 1, { id: {} }, { id: 'abc', message: 5, author: 'me' }], total_commits: -3, forkee: 4, member: {} },
  ];

  it.each(EVENTS)('never throws on odd %s bodies from any GitHub-family forge', (event) => {
    for (const forge of ['github', 'gitea', 'forgejo'] as const) {
      for (const payload of ODD_BODIES) {
        expect(textOf(renderGithub({ headers: { [`x-${forge}-event`]: event }, payload }, forge)).length).toBeGreaterThan(0);
      }
    }
  });

  it.each(['Push Hook', 'Tag Push Hook', 'Merge Request Hook', 'Issue Hook', 'Note Hook', 'Pipeline Hook', 'Job Hook', 'Release Hook', 'System Hook'])(
    'never throws on odd GitLab %s bodies',
    (hook) => {
      const odd: unknown[] = [...ODD_BODIES, { object_attributes: { iid: 'x', noteable_type: 5 }, builds: 'x', project: [] }, { object_kind: 'note', object_attributes: { noteable_type: 'Commit' }, commit: {} }];
      for (const payload of odd) {
        expect(textOf(renderGitlab({ headers: { 'x-gitlab-event': hook }, payload })).length).toBeGreaterThan(0);
      }
    },
  );
});
