/**
 * GitHub, Gitea and Forgejo webhooks. Gitea and Forgejo copied GitHub's payloads, so one renderer
 * reads all three; their differences (event headers, commit order, fork direction, review events)
 * are small branches. The push, CI and generic phrasing is also used by gitlab.ts.
 */
import {
  arr,
  bold,
  clipChars,
  code,
  firstLine,
  link,
  num,
  obj,
  plural,
  quoted,
  rich,
  safeUrl,
  str,
  type Part,
  type RenderedWebhook,
  type Rich,
} from './rich-text.js';
import { header, type SkippedWebhook, type WebhookRequest } from './types.js';

export type GithubFamily = 'github' | 'gitea' | 'forgejo';

const FORGE_NAMES: Record<GithubFamily, string> = { github: 'GitHub', gitea: 'Gitea', forgejo: 'Forgejo' };

/** Where each forge names the event, its own header first (Forgejo and Gitea send the others' too). */
const EVENT_HEADERS: Record<GithubFamily, string[]> = {
  github: ['x-github-event'],
  // Gitea leaves X-Gitea-Event empty for newer events (status, package) and names them only in -Type.
  gitea: ['x-gitea-event', 'x-gitea-event-type', 'x-gogs-event', 'x-github-event'],
  forgejo: ['x-forgejo-event', 'x-forgejo-event-type', 'x-gitea-event', 'x-gitea-event-type', 'x-github-event'],
};

const NAME_CHARS = 200;
const COMMENT_CHARS = 500;
const EXCERPT_CHARS = 300;
const LISTED_COMMITS = 5;

// ---- shared with gitlab.ts ----

/** A one-line name or title from the payload, clipped so one event cannot flood a room. */
export function clipped(value: unknown): string | undefined {
  return firstLine(value, NAME_CHARS);
}

export function isZeroSha(value: unknown): boolean {
  const sha = str(value);
  return sha !== undefined && /^0+$/.test(sha);
}

export function shortSha(sha: string): string {
  return sha.slice(0, 7);
}

/** The acting user in bold, or a neutral word when the payload does not say. */
export function actorPart(actor: string | undefined): Rich {
  return actor === undefined ? rich('Someone') : bold(actor);
}

/** " in owner/repo" (linked), or nothing when the repository is unknown. */
export function inRepo(preposition: string, repo: Rich | undefined): Rich | undefined {
  return repo === undefined ? undefined : rich(` ${preposition} `, repo);
}

/** ": title", or nothing. */
export function titlePart(title: string | undefined): Rich | undefined {
  return title === undefined ? undefined : rich(': ', title);
}

/** "#12" or "!12" linked to its page, after a noun ("pull request #12"). */
export function numbered(noun: string, marker: string, number: number | undefined, url: unknown): Rich {
  return number === undefined ? link(safeUrl(url), noun) : rich(`${noun} `, link(safeUrl(url), `${marker}${number}`));
}

/** The first paragraph of an issue or pull request description, quoted. */
export function excerpt(value: unknown): Rich | undefined {
  const text = str(value);
  if (text === undefined) return undefined;
  const paragraph = text.split(/\r?\n\s*\r?\n/, 1)[0]!.trim();
  return quoted(clipChars(paragraph, EXCERPT_CHARS));
}

/** A comment, quoted. */
export function commentBlock(value: unknown): Rich | undefined {
  const text = str(value);
  return text === undefined ? undefined : quoted(clipChars(text, COMMENT_CHARS));
}

/**
 * Outcome emoji and words of a CI status or conclusion, GitHub's and GitLab's alike. Headline style
 * without "is"/"was", so they fit "Workflow test" and "octocoders-linter checks" both.
 */
const OUTCOMES: Record<string, readonly [string, string]> = {
  success: ['✅', 'succeeded'],
  failure: ['❌', 'failed'],
  failed: ['❌', 'failed'],
  error: ['❌', 'errored'],
  startup_failure: ['❌', 'failed to start'],
  cancelled: ['⏹️', 'cancelled'],
  canceled: ['⏹️', 'cancelled'],
  timed_out: ['⏱️', 'timed out'],
  skipped: ['⏭️', 'skipped'],
  neutral: ['⚪', 'finished (neutral)'],
  action_required: ['⚠️', 'finished: action required'],
  warning: ['⚠️', 'finished with warnings'],
  stale: ['⚪', 'went stale'],
  manual: ['⏸️', 'waiting for a manual action'],
  requested: ['⏳', 'requested'],
  queued: ['⏳', 'queued'],
  waiting: ['⏳', 'waiting'],
  waiting_for_resource: ['⏳', 'waiting for a resource'],
  created: ['⏳', 'created'],
  scheduled: ['⏳', 'scheduled'],
  preparing: ['⏳', 'preparing'],
  pending: ['⏳', 'pending'],
  in_progress: ['⏳', 'running'],
  running: ['⏳', 'running'],
};

/** States of a run that has not finished: rooms hear of a run once, when it has an outcome. */
const UNFINISHED = new Set(['requested', 'queued', 'waiting', 'waiting_for_resource', 'created', 'scheduled', 'preparing', 'pending', 'in_progress', 'running']);

/** Skips a run that has not finished yet; undefined when it has (or says nothing of its state). */
export function skipUnfinished(status: string | undefined): SkippedWebhook | undefined {
  const key = status?.toLowerCase();
  return key !== undefined && UNFINISHED.has(key) ? { skipped: `Not posted: the run is ${key.replace(/_/g, ' ')}; it is posted when it finishes.` } : undefined;
}

export function outcome(status: string | undefined): { emoji: string; verb: string } {
  const key = status?.toLowerCase();
  if (key !== undefined && Object.hasOwn(OUTCOMES, key)) {
    const [emoji, verb] = OUTCOMES[key]!;
    return { emoji, verb };
  }
  return { emoji: '⚪', verb: status === undefined ? 'finished' : status.replace(/_/g, ' ') };
}

export interface PushedCommit {
  sha: string;
  url: string | undefined;
  subject: string | undefined;
  author: string | undefined;
}

/** A commit as GitHub, Gitea, Forgejo and GitLab all describe it in a push. */
export function readCommit(value: unknown): PushedCommit | undefined {
  const commit = obj(value);
  const sha = str(commit.id);
  if (sha === undefined) return undefined;
  const author = obj(commit.author);
  return { sha, url: safeUrl(commit.url), subject: clipped(commit.message), author: clipped(author.name) ?? clipped(author.username) };
}

export interface Push {
  actor: string | undefined;
  repo: Rich | undefined;
  ref: string;
  created: boolean;
  deleted: boolean;
  forced: boolean;
  /** All pushed commits, which may be more than `commits` lists. */
  count: number;
  /** Newest first. */
  commits: PushedCommit[];
  head: PushedCommit | undefined;
  /** The compare page or the tag's page; unused for a deletion, which leaves nothing to open. */
  url: string | undefined;
}

function refName(ref: string): { kind: string; name: string } {
  if (ref.startsWith('refs/heads/')) return { kind: 'branch', name: ref.slice('refs/heads/'.length) };
  if (ref.startsWith('refs/tags/')) return { kind: 'tag', name: ref.slice('refs/tags/'.length) };
  return { kind: 'ref', name: ref };
}

/** A push in one sentence; creations, deletions and tags are said as such, never as "0 commits". */
export function renderPush(push: Push): RenderedWebhook {
  const { kind, name } = refName(push.ref);
  const who = actorPart(push.actor);
  const where = code(clipChars(name, NAME_CHARS));
  const ofRepo = inRepo('of', push.repo);
  if (push.deleted) return { summary: rich(who, ` deleted ${kind} `, where, ofRepo) };
  if (kind === 'tag') {
    const tag = link(push.url, where);
    const summary = push.created ? rich(who, ' pushed tag ', tag, inRepo('to', push.repo)) : rich(who, ' moved tag ', tag, ofRepo);
    return { summary, url: push.url };
  }
  const commits = push.count > 0 ? link(push.url, plural(push.count, 'commit')) : undefined;
  const others = push.count > 1 ? ` (and ${push.count - 1} more)` : '';
  const subject = push.count > 0 && push.head?.subject !== undefined ? rich(': ', push.head.subject, others) : undefined;
  const pushed = push.forced ? ' force-pushed ' : ' pushed ';
  let summary: Rich;
  if (push.created) summary = rich(who, ` created ${kind} `, where, ofRepo, commits && rich(' with ', commits), subject);
  else if (commits === undefined) summary = rich(who, push.forced ? pushed : ' pushed to ', where, ofRepo);
  else summary = rich(who, pushed, commits, ' to ', where, ofRepo, subject);
  return { summary, url: push.url, details: commitDetails(push) };
}

function commitDetails(push: Push): Rich[] {
  const shown = push.commits.slice(0, LISTED_COMMITS);
  const details = shown.map((commit) =>
    rich(link(commit.url, code(shortSha(commit.sha))), commit.subject && rich(' ', commit.subject), commit.author && rich(' — ', commit.author)),
  );
  const more = push.count - shown.length;
  if (shown.length > 0 && more > 0) details.push(link(push.url, `… and ${more} more`));
  return details;
}

/** "<sender> sent a <event> event (<action>) in <repo>": for events no handler knows. */
export function genericEvent(
  forgeName: string,
  event: string | undefined,
  facts: { actor: string | undefined; action: string | undefined; repo: Rich | undefined; url: string | undefined },
): RenderedWebhook {
  const name = clipChars(event ?? 'webhook', NAME_CHARS);
  const article = /^[aeiou]/i.test(name) ? 'an' : 'a';
  const who = facts.actor === undefined ? rich(forgeName) : bold(facts.actor);
  return {
    summary: rich(who, ` sent ${article} `, code(name), ' event', facts.action && ` (${facts.action})`, inRepo('in', facts.repo)),
    url: facts.url,
  };
}

// ---- GitHub, Gitea, Forgejo ----

interface Repo {
  link: Rich;
  url: string | undefined;
}

interface Context {
  forge: GithubFamily;
  event: string;
  body: Record<string, unknown>;
  action: string | undefined;
  /** The sender's login. */
  actor: string | undefined;
  repo: Repo | undefined;
}

type Handler = (context: Context) => RenderedWebhook | SkippedWebhook | undefined;

function login(value: unknown): string | undefined {
  const user = obj(value);
  return clipped(user.login) ?? clipped(user.username) ?? clipped(user.name);
}

function repository(value: unknown): Repo | undefined {
  const repo = obj(value);
  const name = clipped(repo.full_name) ?? clipped(repo.name);
  if (name === undefined) return undefined;
  const url = safeUrl(repo.html_url);
  return { link: link(url, name), url };
}

function commitUrl(context: Context, sha: string): string | undefined {
  return context.repo?.url === undefined ? undefined : safeUrl(`${context.repo.url.replace(/\/+$/, '')}/commit/${encodeURIComponent(sha)}`);
}

function push(context: Context): RenderedWebhook | undefined {
  const { body, forge } = context;
  const ref = typeof body.ref === 'string' ? str(body.ref) : undefined;
  if (ref === undefined) return undefined;
  const listed = arr(body.commits)
    .map(readCommit)
    .filter((commit) => commit !== undefined);
  // GitHub lists the oldest commit first, Gitea and Forgejo the newest.
  const commits = forge === 'github' ? listed.reverse() : listed;
  const head = readCommit(body.head_commit) ?? commits[0];
  const pusher = obj(body.pusher);
  return renderPush({
    actor: clipped(pusher.login) ?? clipped(pusher.username) ?? clipped(pusher.name) ?? context.actor,
    repo: context.repo?.link,
    ref,
    created: body.created === true || isZeroSha(body.before),
    deleted: body.deleted === true || isZeroSha(body.after),
    forced: body.forced === true,
    count: Math.max(num(body.total_commits) ?? 0, commits.length),
    commits,
    head,
    url: safeUrl(body.compare) ?? safeUrl(body.compare_url) ?? head?.url ?? context.repo?.url,
  });
}

/** "<actor> <verb> <item> in <repo><after>: <title>": every issue, pull request and comment line. */
function itemSentence(context: Context, verb: Part, item: Rich, title: unknown, after?: Part): Rich {
  return rich(actorPart(context.actor), ' ', verb, ' ', item, inRepo('in', context.repo?.link), after, titlePart(clipped(title)));
}

/** How an issue or pull request action reads: a verb before the item and words after the repository. */
function itemAction(context: Context, item: Record<string, unknown>, isPull: boolean): { verb: Part; after?: Part } {
  const { body, action } = context;
  const named = (before: string, name: string | undefined, after: string, fallback: string): Part =>
    name === undefined ? fallback : rich(before, bold(name), after);
  switch (action) {
    case 'closed':
      // A merged pull request is "closed" too; only `merged` tells them apart.
      if (isPull && item.merged === true) return { verb: 'merged' };
      if (isPull) return { verb: 'closed', after: ' without merging' };
      return { verb: 'closed', after: item.state_reason === 'not_planned' ? ' as not planned' : undefined };
    case 'synchronize':
    case 'synchronized':
      return { verb: 'pushed new commits to' };
    case 'ready_for_review':
      return { verb: 'marked', after: ' ready for review' };
    case 'converted_to_draft':
      return { verb: 'converted', after: ' to a draft' };
    case 'review_requested': {
      const reviewer = login(body.requested_reviewer) ?? clipped(obj(body.requested_team).name);
      return { verb: named('requested a review from ', reviewer, ' on', 'requested a review on') };
    }
    case 'review_request_removed':
      return { verb: named('withdrew the review request for ', login(body.requested_reviewer), ' on', 'withdrew a review request on') };
    case 'assigned':
      return { verb: named('assigned ', login(body.assignee) ?? login(item.assignee), ' to', 'assigned') };
    case 'unassigned':
      return { verb: named('unassigned ', login(body.assignee), ' from', 'unassigned') };
    case 'labeled':
      return { verb: named('added label ', clipped(obj(body.label).name), ' to', 'labeled') };
    case 'unlabeled':
      return { verb: named('removed label ', clipped(obj(body.label).name), ' from', 'unlabeled') };
    case 'label_updated':
      return { verb: 'updated the labels of' };
    case 'label_cleared':
      return { verb: 'cleared the labels of' };
    case 'milestoned': {
      const milestone = clipped(obj(body.milestone).title) ?? clipped(obj(item.milestone).title);
      return { verb: named('added milestone ', milestone, ' to', 'set a milestone on') };
    }
    case 'demilestoned':
      return { verb: 'removed the milestone from' };
    case 'auto_merge_enabled':
      return { verb: 'enabled auto-merge for' };
    case 'auto_merge_disabled':
      return { verb: 'disabled auto-merge for' };
    default:
      return { verb: (action ?? 'updated').replace(/_/g, ' ') };
  }
}

function pullRequest(context: Context): RenderedWebhook | undefined {
  const pr = obj(context.body.pull_request);
  const number = num(pr.number) ?? num(context.body.number);
  if (number === undefined) return undefined;
  const { verb, after } = itemAction(context, pr, true);
  return {
    summary: itemSentence(context, verb, numbered('pull request', '#', number, pr.html_url), pr.title, after),
    url: safeUrl(pr.html_url),
    block: context.action === 'opened' ? excerpt(pr.body) : undefined,
  };
}

function issue(context: Context): RenderedWebhook | undefined {
  const item = obj(context.body.issue);
  const number = num(item.number) ?? num(context.body.number);
  if (number === undefined) return undefined;
  const { verb, after } = itemAction(context, item, false);
  return {
    summary: itemSentence(context, verb, numbered('issue', '#', number, item.html_url), item.title, after),
    url: safeUrl(item.html_url),
    block: context.action === 'opened' ? excerpt(item.body) : undefined,
  };
}

function commentVerb(action: string | undefined): string {
  if (action === 'edited') return 'edited a comment on';
  if (action === 'deleted') return 'deleted a comment on';
  return 'commented on';
}

/** A comment on an issue or pull request (GitHub sends both as issue_comment, Gitea too with `is_pull`). */
function issueComment(context: Context): RenderedWebhook | undefined {
  const { body } = context;
  const item = obj(body.issue);
  const comment = obj(body.comment);
  const number = num(item.number);
  if (number === undefined) return undefined;
  const isPull = body.is_pull === true || (typeof item.pull_request === 'object' && item.pull_request !== null);
  const target = numbered(isPull ? 'pull request' : 'issue', '#', number, item.html_url);
  return {
    summary: itemSentence(context, commentVerb(context.action), target, item.title),
    url: safeUrl(comment.html_url) ?? safeUrl(item.html_url),
    block: context.action === 'deleted' ? undefined : commentBlock(comment.body),
  };
}

function reviewComment(context: Context): RenderedWebhook | undefined {
  const pr = obj(context.body.pull_request);
  const comment = obj(context.body.comment);
  const number = num(pr.number);
  if (number === undefined) return undefined;
  return {
    summary: itemSentence(context, commentVerb(context.action), numbered('pull request', '#', number, pr.html_url), pr.title),
    url: safeUrl(comment.html_url) ?? safeUrl(pr.html_url),
    block: context.action === 'deleted' ? undefined : commentBlock(comment.body),
  };
}

/** Gitea and Forgejo name the review's verdict in the event, GitHub in `review.state`. */
const GITEA_REVIEW_STATES: Record<string, string> = {
  pull_request_approved: 'approved',
  pull_request_rejected: 'changes_requested',
  pull_request_comment: 'commented',
};

function review(context: Context): RenderedWebhook | undefined {
  const pr = obj(context.body.pull_request);
  const details = obj(context.body.review);
  const number = num(pr.number) ?? num(context.body.number);
  if (number === undefined) return undefined;
  const state = (str(details.state) ?? GITEA_REVIEW_STATES[context.event])?.toLowerCase();
  let verb = 'reviewed';
  if (context.action === 'dismissed') verb = 'dismissed a review on';
  else if (context.action === 'edited') verb = 'edited a review on';
  else if (state === 'approved') verb = 'approved';
  else if (state === 'changes_requested') verb = 'requested changes on';
  return {
    summary: itemSentence(context, verb, numbered('pull request', '#', number, pr.html_url), pr.title),
    url: safeUrl(details.html_url) ?? safeUrl(pr.html_url),
    block: commentBlock(details.body ?? details.content),
  };
}

function commitComment(context: Context): RenderedWebhook | undefined {
  const comment = obj(context.body.comment);
  const sha = str(comment.commit_id);
  if (sha === undefined) return undefined;
  return {
    summary: itemSentence(context, 'commented on', rich('commit ', link(commitUrl(context, sha), code(shortSha(sha)))), undefined),
    url: safeUrl(comment.html_url),
    block: commentBlock(comment.body),
  };
}

/**
 * GitHub sends one publication up to three times (created, published, released or prereleased);
 * only "published" is posted. (A draft is "created", and nobody needs to hear of it yet.)
 */
const DUPLICATE_RELEASE_ACTIONS = new Set(['created', 'released', 'prereleased']);

const RELEASE_VERBS: Record<string, string> = {
  published: 'published',
  edited: 'edited',
  updated: 'edited',
  deleted: 'deleted',
  unpublished: 'unpublished',
};

/** "Name (tag)" when both are given and differ, else whichever there is (GitHub often leaves the name empty). */
export function releaseLabel(name: string | undefined, tag: string | undefined, url: string | undefined): Rich {
  if (name !== undefined && tag !== undefined && name !== tag) return rich(link(url, name), ' (', code(tag), ')');
  return tag !== undefined ? link(url, code(tag)) : link(url, name);
}

function release(context: Context): RenderedWebhook | SkippedWebhook | undefined {
  if (context.forge === 'github' && context.action !== undefined && DUPLICATE_RELEASE_ACTIONS.has(context.action)) {
    return { skipped: `Not posted: GitHub also sends "published" for this release, and that one is posted.` };
  }
  const item = obj(context.body.release);
  const tag = clipped(item.tag_name);
  const name = clipped(item.name);
  if (tag === undefined && name === undefined) return undefined;
  const url = safeUrl(item.html_url);
  const noun = item.prerelease === true ? 'pre-release' : item.draft === true ? 'draft release' : 'release';
  const action = context.action;
  const verb = action !== undefined && Object.hasOwn(RELEASE_VERBS, action) ? RELEASE_VERBS[action] : (action ?? 'updated').replace(/_/g, ' ');
  return {
    summary: rich(actorPart(context.actor), ` ${verb} ${noun} `, releaseLabel(name, tag, url), inRepo('of', context.repo?.link)),
    url,
  };
}

/** The conclusion once a run is completed, else its status ("queued", "in_progress"). */
function runState(item: Record<string, unknown>): string | undefined {
  const status = str(item.status);
  return status === 'completed' ? (str(item.conclusion) ?? status) : status;
}

function onBranch(branch: string | undefined): Rich | undefined {
  return branch === undefined ? undefined : rich(' on ', code(branch));
}

function workflowRun(context: Context): RenderedWebhook | SkippedWebhook | undefined {
  const run = obj(context.body.workflow_run);
  if (Object.keys(run).length === 0) return undefined;
  const unfinished = skipUnfinished(runState(run));
  if (unfinished) return unfinished;
  // A run's own name can be empty; the workflow's is the one people know.
  const name = clipped(run.name) ?? clipped(obj(context.body.workflow).name) ?? 'run';
  const { emoji, verb } = outcome(runState(run));
  const url = safeUrl(run.html_url);
  const title = clipped(run.display_title) ?? clipped(obj(run.head_commit).message);
  return {
    summary: rich(
      `${emoji} Workflow `,
      link(url, name),
      ` ${verb}`,
      onBranch(clipped(run.head_branch)),
      inRepo('in', context.repo?.link),
      title && rich(' (', title, ')'),
    ),
    url,
  };
}

function workflowJob(context: Context): RenderedWebhook | SkippedWebhook | undefined {
  const job = obj(context.body.workflow_job);
  if (Object.keys(job).length === 0) return undefined;
  const unfinished = skipUnfinished(runState(job));
  if (unfinished) return unfinished;
  const { emoji, verb } = outcome(runState(job));
  const url = safeUrl(job.html_url);
  const workflow = clipped(job.workflow_name);
  return {
    summary: rich(
      `${emoji} Job `,
      link(url, clipped(job.name) ?? 'job'),
      workflow && rich(' of workflow ', workflow),
      ` ${verb}`,
      onBranch(clipped(job.head_branch)),
      inRepo('in', context.repo?.link),
    ),
    url,
  };
}

function shaPart(context: Context, sha: string | undefined): Rich | undefined {
  return sha === undefined ? undefined : rich(' (', link(commitUrl(context, sha), code(shortSha(sha))), ')');
}

function checkSuite(context: Context): RenderedWebhook | SkippedWebhook | undefined {
  const suite = obj(context.body.check_suite);
  if (Object.keys(suite).length === 0) return undefined;
  const unfinished = skipUnfinished(runState(suite) ?? context.action);
  if (unfinished) return unfinished;
  const app = clipped(obj(suite.app).name);
  const sha = str(suite.head_sha);
  const { emoji, verb } = outcome(runState(suite) ?? context.action);
  // A check suite has no page of its own: its commit shows the checks.
  return {
    summary: rich(
      `${emoji} `,
      app === undefined ? 'Checks' : rich(app, ' checks'),
      ` ${verb}`,
      onBranch(clipped(suite.head_branch)),
      shaPart(context, sha),
      inRepo('in', context.repo?.link),
    ),
    url: sha === undefined ? context.repo?.url : commitUrl(context, sha),
  };
}

function checkRun(context: Context): RenderedWebhook | SkippedWebhook | undefined {
  const run = obj(context.body.check_run);
  if (Object.keys(run).length === 0) return undefined;
  const unfinished = skipUnfinished(runState(run) ?? context.action);
  if (unfinished) return unfinished;
  const { emoji, verb } = outcome(runState(run) ?? context.action);
  const url = safeUrl(run.html_url) ?? safeUrl(run.details_url);
  return {
    summary: rich(
      `${emoji} Check `,
      link(url, clipped(run.name) ?? 'run'),
      ` ${verb}`,
      onBranch(clipped(obj(run.check_suite).head_branch)),
      shaPart(context, str(run.head_sha)),
      inRepo('in', context.repo?.link),
    ),
    url,
  };
}

/** A commit status (GitHub's "status", Gitea's too): external CI reporting on one commit. */
function commitStatus(context: Context): RenderedWebhook | SkippedWebhook | undefined {
  const { body } = context;
  const state = str(body.state);
  if (state === undefined) return undefined;
  const unfinished = skipUnfinished(state);
  if (unfinished) return unfinished;
  const { emoji, verb } = outcome(state);
  const sha = str(body.sha);
  const url = safeUrl(body.target_url);
  return {
    summary: rich(
      `${emoji} `,
      link(url, clipped(body.context) ?? 'Status'),
      ` ${verb}`,
      shaPart(context, sha),
      inRepo('in', context.repo?.link),
      titlePart(clipped(body.description)),
    ),
    url: url ?? (sha === undefined ? undefined : commitUrl(context, sha)),
  };
}

function ping(context: Context): RenderedWebhook {
  const { body } = context;
  const target = context.repo?.link ?? clipped(obj(body.organization).login);
  const events = arr(obj(body.hook).events)
    .map((event) => str(event))
    .filter((event) => event !== undefined);
  return {
    summary: rich(
      `${FORGE_NAMES[context.forge]} webhook`,
      target && rich(' for ', target),
      ' is connected',
      events.length > 0 && ` (events: ${clipChars(events.join(', '), NAME_CHARS)})`,
    ),
  };
}

/** GitHub's and Gitea's create/delete events: a branch or tag made or removed, apart from the push. */
function refEvent(context: Context): RenderedWebhook | undefined {
  const ref = clipped(context.body.ref);
  if (ref === undefined) return undefined;
  const kind = clipped(context.body.ref_type) ?? 'ref';
  const verb = context.event === 'create' ? 'created' : 'deleted';
  return { summary: rich(actorPart(context.actor), ` ${verb} ${kind} `, code(ref), inRepo('of', context.repo?.link)), url: context.repo?.url };
}

function star(context: Context): RenderedWebhook | undefined {
  if (context.repo === undefined) return undefined;
  // GitHub's "watch" event is starring, despite its name.
  const verb = context.action === 'deleted' ? 'unstarred' : 'starred';
  return { summary: rich(actorPart(context.actor), ` ${verb} `, context.repo.link), url: context.repo.url };
}

function fork(context: Context): RenderedWebhook | undefined {
  const forkee = repository(context.body.forkee);
  // GitHub's forkee is the new fork; Gitea's and Forgejo's is the original and `repository` the fork.
  const [original, copy] = context.forge === 'github' ? [context.repo, forkee] : [forkee, context.repo];
  if (original === undefined) return undefined;
  return { summary: rich(actorPart(context.actor), ' forked ', original.link, copy && rich(' to ', copy.link)), url: copy?.url ?? original.url };
}

function member(context: Context): RenderedWebhook | undefined {
  const name = login(context.body.member);
  if (name === undefined) return undefined;
  const phrases: Record<string, Part[]> = {
    added: [' added ', bold(name), ' as a collaborator', inRepo('to', context.repo?.link)],
    removed: [' removed ', bold(name), ' as a collaborator', inRepo('from', context.repo?.link)],
    edited: [' changed the access of ', bold(name), inRepo('in', context.repo?.link)],
  };
  const phrase = context.action !== undefined && Object.hasOwn(phrases, context.action) ? phrases[context.action] : undefined;
  return phrase === undefined ? undefined : { summary: rich(actorPart(context.actor), ...phrase), url: context.repo?.url };
}

const REPOSITORY_ACTIONS = new Set(['created', 'deleted', 'archived', 'unarchived', 'renamed', 'transferred', 'edited']);

function repositoryEvent(context: Context): RenderedWebhook | undefined {
  const { action, repo } = context;
  if (action === undefined || !REPOSITORY_ACTIONS.has(action) || repo === undefined) return undefined;
  return { summary: rich(actorPart(context.actor), ` ${action} repository `, repo.link), url: repo.url };
}

function publicized(context: Context): RenderedWebhook | undefined {
  if (context.repo === undefined) return undefined;
  return { summary: rich(actorPart(context.actor), ' made ', context.repo.link, ' public'), url: context.repo.url };
}

const HANDLERS = new Map<string, Handler>([
  ['push', push],
  ['pull_request', pullRequest],
  ['issues', issue],
  ['issue_comment', issueComment],
  ['pull_request_review_comment', reviewComment],
  ['pull_request_review', review],
  ['pull_request_approved', review],
  ['pull_request_rejected', review],
  // Gitea's and Forgejo's name for a review that only comments (GitHub has no such event).
  ['pull_request_comment', review],
  ['commit_comment', commitComment],
  ['release', release],
  ['workflow_run', workflowRun],
  ['workflow_job', workflowJob],
  ['check_suite', checkSuite],
  ['check_run', checkRun],
  ['status', commitStatus],
  ['ping', ping],
  ['create', refEvent],
  ['delete', refEvent],
  ['star', star],
  ['watch', star],
  ['fork', fork],
  ['member', member],
  ['repository', repositoryEvent],
  ['public', publicized],
]);

function eventName(request: WebhookRequest, forge: GithubFamily): string | undefined {
  for (const name of EVENT_HEADERS[forge]) {
    const value = header(request, name);
    if (value !== undefined) return value;
  }
  return undefined;
}

export function renderGithub(request: WebhookRequest, forge: GithubFamily): RenderedWebhook | SkippedWebhook {
  const body = obj(request.payload);
  const event = eventName(request, forge);
  const repo = repository(body.repository);
  const context: Context = { forge, event: event ?? '', body, action: clipped(body.action), actor: login(body.sender), repo };
  const rendered = event === undefined ? undefined : HANDLERS.get(event)?.(context);
  return rendered ?? genericEvent(FORGE_NAMES[forge], event, { actor: context.actor, action: context.action, repo: repo?.link, url: repo?.url });
}
