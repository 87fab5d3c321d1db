/**
 * GitLab webhooks. The event is named by `X-Gitlab-Event` ("Push Hook") and again by the body's
 * `object_kind`, which is used when the header is missing. Pushes and CI read like the GitHub ones.
 */
import {
  actorPart,
  clipped,
  commentBlock,
  excerpt,
  genericEvent,
  inRepo,
  isZeroSha,
  numbered,
  outcome,
  readCommit,
  releaseLabel,
  renderPush,
  shortSha,
  titlePart,
  type PushedCommit,
  skipUnfinished,
} from './github.js';
import { arr, code, join, link, num, obj, rich, safeUrl, str, type RenderedWebhook, type Rich } from './rich-text.js';
import { header, type SkippedWebhook, type WebhookRequest } from './types.js';

interface Project {
  link: Rich;
  /** The project's web page, without a trailing slash, for building the pages GitLab does not send. */
  url: string | undefined;
}

type Body = Record<string, unknown>;
type Handler = (body: Body, project: Project | undefined) => RenderedWebhook | SkippedWebhook | undefined;

const LISTED_JOBS = 5;

const KIND_OF_HEADER = new Map<string, string>([
  ['Push Hook', 'push'],
  ['Tag Push Hook', 'tag_push'],
  ['Merge Request Hook', 'merge_request'],
  ['Issue Hook', 'issue'],
  ['Confidential Issue Hook', 'issue'],
  ['Note Hook', 'note'],
  ['Confidential Note Hook', 'note'],
  ['Pipeline Hook', 'pipeline'],
  ['Job Hook', 'build'],
  ['Release Hook', 'release'],
]);

function readProject(body: Body): Project | undefined {
  const project = obj(body.project);
  const repository = obj(body.repository);
  const name = clipped(project.path_with_namespace) ?? clipped(project.name) ?? clipped(body.project_name) ?? clipped(repository.name);
  if (name === undefined) return undefined;
  const url = (safeUrl(project.web_url) ?? safeUrl(repository.homepage))?.replace(/\/+$/, '');
  return { link: link(url, name), url };
}

/** A page under the project, when the project's address is known. */
function projectPage(project: Project | undefined, path: string): string | undefined {
  return project?.url === undefined ? undefined : safeUrl(`${project.url}/-/${path}`);
}

/** A branch or tag name as URL path segments (names may hold slashes). */
function refPath(name: string): string {
  return name.split('/').map(encodeURIComponent).join('/');
}

/** The acting user of object events: GitLab's handle, as people mention each other. */
function username(body: Body): string | undefined {
  const user = obj(body.user);
  return clipped(user.username) ?? clipped(user.name);
}

const SHA = /^[0-9a-f]{7,64}$/i;

/** The page a push leads to: the tag, the new branch's head, or the compare view GitLab does not link. */
function pushUrl(body: Body, project: Project | undefined, ref: string, head: PushedCommit | undefined): string | undefined {
  if (ref.startsWith('refs/tags/')) return projectPage(project, `tags/${refPath(ref.slice('refs/tags/'.length))}`);
  if (isZeroSha(body.before)) return head?.url ?? projectPage(project, `tree/${refPath(ref.replace(/^refs\/heads\//, ''))}`);
  const before = str(body.before);
  const after = str(body.after);
  if (before !== undefined && after !== undefined && SHA.test(before) && SHA.test(after)) return projectPage(project, `compare/${before}...${after}`);
  return project?.url;
}

function push(body: Body, project: Project | undefined): RenderedWebhook | undefined {
  const ref = typeof body.ref === 'string' ? str(body.ref) : undefined;
  if (ref === undefined) return undefined;
  // GitLab lists the oldest commit first and at most 20 of them; total_commits_count has them all.
  const commits = arr(body.commits)
    .map(readCommit)
    .filter((commit) => commit !== undefined)
    .reverse();
  const headSha = str(body.checkout_sha) ?? str(body.after);
  const head = commits.find((commit) => commit.sha === headSha) ?? commits[0];
  return renderPush({
    // Push hooks name the pusher by display name (user_name), object hooks by handle.
    actor: clipped(body.user_name) ?? clipped(body.user_username),
    repo: project?.link,
    ref,
    created: isZeroSha(body.before),
    deleted: isZeroSha(body.after),
    forced: false,
    count: Math.max(num(body.total_commits_count) ?? 0, commits.length),
    commits,
    head,
    url: pushUrl(body, project, ref, head),
  });
}

function mergeRequestVerb(attributes: Body): string {
  const action = str(attributes.action);
  switch (action) {
    case 'open':
      return 'opened';
    case 'close':
      return 'closed';
    case 'reopen':
      return 'reopened';
    case 'merge':
      return 'merged';
    case 'update':
      // `oldrev` is there only when the update was a push to the source branch.
      return str(attributes.oldrev) === undefined ? 'updated' : 'pushed new commits to';
    case 'approved':
    case 'approval':
      return 'approved';
    case 'unapproved':
    case 'unapproval':
      return 'revoked approval of';
    case undefined:
      return str(attributes.state) === 'merged' ? 'merged' : 'updated';
    default:
      return action.replace(/_/g, ' ');
  }
}

function mergeRequest(body: Body, project: Project | undefined): RenderedWebhook | undefined {
  const attributes = obj(body.object_attributes);
  const iid = num(attributes.iid);
  if (iid === undefined) return undefined;
  const source = clipped(attributes.source_branch);
  const target = clipped(attributes.target_branch);
  const branches = source !== undefined && target !== undefined ? rich(' (', code(source), ' → ', code(target), ')') : undefined;
  return {
    summary: rich(
      actorPart(username(body)),
      ` ${mergeRequestVerb(attributes)} `,
      numbered('merge request', '!', iid, attributes.url),
      inRepo('in', project?.link),
      titlePart(clipped(attributes.title)),
      branches,
    ),
    url: safeUrl(attributes.url),
    block: attributes.action === 'open' ? excerpt(attributes.description) : undefined,
  };
}

const ISSUE_VERBS: Record<string, string> = { open: 'opened', close: 'closed', reopen: 'reopened', update: 'updated' };

function issue(body: Body, project: Project | undefined): RenderedWebhook | undefined {
  const attributes = obj(body.object_attributes);
  const iid = num(attributes.iid);
  if (iid === undefined) return undefined;
  const action = str(attributes.action);
  const verb = action !== undefined && Object.hasOwn(ISSUE_VERBS, action) ? ISSUE_VERBS[action] : (action ?? 'updated').replace(/_/g, ' ');
  return {
    summary: rich(
      actorPart(username(body)),
      ` ${verb} `,
      numbered('issue', '#', iid, attributes.url),
      inRepo('in', project?.link),
      titlePart(clipped(attributes.title)),
    ),
    url: safeUrl(attributes.url),
    block: action === 'open' ? excerpt(attributes.description) : undefined,
  };
}

/** What a note was left on, and that thing's title. */
function noteTarget(body: Body, type: string | undefined): { target: Rich; title: string | undefined } {
  switch (type) {
    case 'MergeRequest': {
      const mr = obj(body.merge_request);
      return { target: numbered('merge request', '!', num(mr.iid), mr.url), title: clipped(mr.title) };
    }
    case 'Issue': {
      const item = obj(body.issue);
      return { target: numbered('issue', '#', num(item.iid), item.url), title: clipped(item.title) };
    }
    case 'Commit': {
      const commit = obj(body.commit);
      const sha = str(commit.id);
      return { target: rich('commit', sha && rich(' ', link(safeUrl(commit.url), code(shortSha(sha))))), title: clipped(commit.message) };
    }
    case 'Snippet': {
      const snippet = obj(body.snippet);
      return { target: numbered('snippet', '$', num(snippet.id), snippet.url), title: clipped(snippet.title) };
    }
    default:
      return { target: rich(clipped(type)?.toLowerCase() ?? 'something'), title: undefined };
  }
}

function note(body: Body, project: Project | undefined): RenderedWebhook | undefined {
  const attributes = obj(body.object_attributes);
  const type = str(attributes.noteable_type);
  const text = attributes.note ?? attributes.description;
  if (type === undefined && str(text) === undefined) return undefined;
  const { target, title } = noteTarget(body, type);
  return {
    summary: rich(actorPart(username(body)), ' commented on ', target, inRepo('in', project?.link), titlePart(title)),
    url: safeUrl(attributes.url),
    block: commentBlock(text),
  };
}

function onRef(ref: string | undefined, isTag: boolean): Rich | undefined {
  return ref === undefined ? undefined : rich(isTag ? ' on tag ' : ' on ', code(ref));
}

/** "a, b, c and 4 more", each name in `<code>`. */
function jobList(names: string[]): Rich {
  const shown = names.slice(0, LISTED_JOBS);
  const more = names.length - shown.length;
  return rich(join(shown.map((name) => code(name)), ', '), more > 0 && ` and ${more} more`);
}

function pipeline(body: Body, project: Project | undefined): RenderedWebhook | SkippedWebhook | undefined {
  const attributes = obj(body.object_attributes);
  const id = num(attributes.id);
  if (id === undefined) return undefined;
  const unfinished = skipUnfinished(str(attributes.status));
  if (unfinished) return unfinished;
  const { emoji, verb } = outcome(str(attributes.status));
  // Older GitLab versions send no pipeline URL.
  const url = safeUrl(attributes.url) ?? projectPage(project, `pipelines/${id}`);
  const mr = obj(body.merge_request);
  const mrIid = num(mr.iid);
  const mrTitle = clipped(mr.title);
  const failedJobs = arr(body.builds)
    .map(obj)
    .filter((job) => job.status === 'failed' && job.allow_failure !== true)
    .map((job) => clipped(job.name))
    .filter((name) => name !== undefined);
  return {
    summary: rich(
      `${emoji} `,
      link(url, `Pipeline #${id}`),
      ` ${verb}`,
      onRef(clipped(attributes.ref), attributes.tag === true),
      inRepo('of', project?.link),
      mrIid !== undefined && rich(' (', link(safeUrl(mr.url), `MR !${mrIid}`), mrTitle && rich(' ', mrTitle), ')'),
      failedJobs.length > 0 && rich(failedJobs.length === 1 ? '; failed job: ' : '; failed jobs: ', jobList(failedJobs)),
    ),
    url,
  };
}

function job(body: Body, project: Project | undefined): RenderedWebhook | SkippedWebhook | undefined {
  const id = num(body.build_id);
  if (id === undefined) return undefined;
  const status = str(body.build_status);
  const unfinished = skipUnfinished(status);
  if (unfinished) return unfinished;
  const { emoji, verb } = outcome(status);
  const url = projectPage(project, `jobs/${id}`);
  const stage = clipped(body.build_stage);
  const allowedToFail = status === 'failed' && body.build_allow_failure === true;
  return {
    summary: rich(
      `${emoji} Job `,
      link(url, clipped(body.build_name) ?? `#${id}`),
      ` ${verb}`,
      allowedToFail && ' (allowed to fail)',
      onRef(clipped(body.ref), body.tag === true),
      inRepo('of', project?.link),
      stage && ` (stage ${stage})`,
    ),
    url,
  };
}

const RELEASE_VERBS: Record<string, string> = { create: 'published', update: 'updated', delete: 'deleted' };

function release(body: Body, project: Project | undefined): RenderedWebhook | undefined {
  const tag = clipped(body.tag);
  const name = clipped(body.name);
  if (tag === undefined && name === undefined) return undefined;
  const action = str(body.action);
  const verb = action !== undefined && Object.hasOwn(RELEASE_VERBS, action) ? RELEASE_VERBS[action] : (action ?? 'updated').replace(/_/g, ' ');
  const url = safeUrl(body.url);
  const label = releaseLabel(name, tag, url);
  const actor = username(body);
  // Release hooks usually carry no user, so the sentence is about the release.
  const summary =
    actor === undefined
      ? rich('Release ', label, inRepo('of', project?.link), ` was ${verb}`)
      : rich(actorPart(actor), ` ${verb} release `, label, inRepo('of', project?.link));
  return { summary, url };
}

const HANDLERS = new Map<string, Handler>([
  ['push', push],
  ['tag_push', push],
  ['merge_request', mergeRequest],
  ['issue', issue],
  ['note', note],
  ['pipeline', pipeline],
  ['build', job],
  ['release', release],
]);

export function renderGitlab(request: WebhookRequest): RenderedWebhook | SkippedWebhook {
  const body = obj(request.payload);
  const hook = header(request, 'x-gitlab-event');
  const kind = (hook === undefined ? undefined : KIND_OF_HEADER.get(hook)) ?? str(body.object_kind) ?? hook;
  const project = readProject(body);
  const rendered = kind === undefined ? undefined : HANDLERS.get(kind)?.(body, project);
  if (rendered !== undefined) return rendered;
  const attributes = obj(body.object_attributes);
  return genericEvent('GitLab', kind, {
    actor: username(body) ?? clipped(body.user_username) ?? clipped(body.user_name),
    action: clipped(attributes.action) ?? clipped(body.action) ?? clipped(attributes.status) ?? clipped(body.status),
    repo: project?.link,
    url: project?.url,
  });
}
