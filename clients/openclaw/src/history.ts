/**
 * `openclaw ovstream import`: the host's stored conversations, older than the plugin, into OV.
 *
 * A command of the host's CLI rather than an `ovstream import` of the service: OpenClaw
 * 2026.9 keeps sessions in per-agent SQLite stores whose layout is its own, and gives
 * plugins the two reads this needs (its session list, `runtime.agent.session.
 * listSessionEntries`, and the visible transcript the engine's bootstrap reads,
 * `readSessionTranscriptVisibleMessageDelta`), where the plugin's config already is.
 *
 * Each session goes out as the event bootstrap publishes (the whole transcript, one
 * event id per session, `import_transcript`), through the same streams and capture as a
 * live turn, so exactly once is capture's: an import lands only in a session capture never
 * applied anything to and OV holds nothing of; a second run, or the same session's
 * bootstrap, writes nothing. Live turns go first: before each session the import waits
 * while capture has more than `maxBacklog` turns to apply or more than `maxCommits` commits
 * are in flight (the RPC's `/v1/scaling`), and it publishes at most `rate` messages a second.
 */

import { randomUUID } from "node:crypto";

import { isBypassed, ovSessionId } from "./ids.js";
import type { PluginRuntime } from "./runtime.js";
import type { AgentMessage } from "./types.js";

/** One session as the host lists it. */
export interface StoredSession {
  agentId: string;
  sessionKey: string;
  sessionId: string;
  /** Last activity, ms since the epoch (when the host says). */
  updatedAt?: number;
}

/** The host's reads the import needs (the real ones: `hostSessions` in cli.ts). */
export interface HostSessions {
  /** Configured agent ids. */
  agents(): string[];
  list(agentId: string): StoredSession[];
  /** The visible transcript; undefined when the host cannot read it. */
  read(session: StoredSession): Promise<AgentMessage[] | undefined>;
}

export interface ImportOptions {
  /** Only these agents (default: every configured one). */
  agents?: string[];
  /** Only sessions whose key matches. */
  match?: RegExp;
  /** Only sessions last active before / after these instants (ms since the epoch). */
  before?: number;
  after?: number;
  /** Messages published per second at most. */
  rate: number;
  dryRun: boolean;
  /** Wait while capture has more turns than this to apply (live turns first). */
  maxBacklog: number;
  /** Wait while more commits than this are in flight (phase 2 not flooded). */
  maxCommits: number;
}

export const IMPORT_DEFAULTS = { rate: 200, maxBacklog: 10, maxCommits: 8 } as const;

export type SessionOutcome = "imported" | "would import" | "bypassed" | "filtered" | "empty" | "unreadable";

export interface ImportProgress {
  done: number;
  total: number;
  messages: number;
  startedAt: number;
  session: StoredSession;
  outcome: SessionOutcome;
}

export interface ImportSummary {
  sessions: number;
  outcomes: Record<SessionOutcome, number>;
  messages: number;
  /** What capture did with what was sent (asked of the service once applied; a dry run asks
   * which sessions capture knows): new to OV, partly there (the rest written now), already
   * there (nothing written), not applied yet when the command stopped asking. */
  inOv?: { written: number; writtenMessages: number; partly: number; partlyMessages: number; already: number; pending: number };
  /** Why the service could not say what capture did (the RPC away, say). */
  inOvUnknown?: string;
  /** Events Redis had not taken when the command ended (kept in the spool; the next run sends them). */
  undelivered: number;
}

/** What the import reads of the service: capture's backlog and the commits in flight. */
export interface ServiceLoad {
  backlog: number;
  commitsInFlight: number;
}

export interface ImportDeps {
  host: HostSessions;
  rt: PluginRuntime;
  /** The service's load now (the RPC's `/v1/scaling`). */
  load: () => Promise<ServiceLoad>;
  /** What capture did with this run's imports (the RPC's `/v1/import/outcomes`); absent: not asked. */
  outcomes?: (run: string, sessions: ImportedSession[]) => Promise<ImportedOutcome[]>;
  progress?: (p: ImportProgress) => void;
  /** Waits (tests: returns at once). */
  sleep?: (ms: number) => Promise<void>;
  now?: () => number;
}

/** One imported session, as the service is asked about it. */
export interface ImportedSession {
  sessionId: string;
  sessionKey: string;
  agentId: string;
  eventId: string;
}

export interface ImportedOutcome {
  eventId: string;
  outcome: "written" | "partly" | "already" | "pending";
  messages: number;
  /** Capture keeps the session's state: an import of it now writes nothing (what a dry run reads). */
  known?: boolean;
}

/** How long the command waits, at most, for capture to apply what it sent before saying so. */
export const OUTCOME_WAIT_MS = 120_000;
const OUTCOME_POLL_MS = 1_000;

const LOAD_POLL_MS = 500;
const DRAIN_WAIT_MS = 10_000;

/** The sessions `opts` selects, each with why it is left out when it is. */
export function selectSessions(
  host: HostSessions,
  opts: Pick<ImportOptions, "agents" | "match" | "before" | "after">,
  bypassPatterns: readonly string[],
): Array<{ session: StoredSession; skip?: SessionOutcome }> {
  const agents = opts.agents && opts.agents.length > 0 ? opts.agents : host.agents();
  const out: Array<{ session: StoredSession; skip?: SessionOutcome }> = [];
  for (const agentId of agents) {
    for (const session of host.list(agentId)) {
      const updated = session.updatedAt;
      const filtered =
        (opts.match !== undefined && !opts.match.test(session.sessionKey)) ||
        (opts.before !== undefined && updated !== undefined && updated >= opts.before) ||
        (opts.after !== undefined && updated !== undefined && updated < opts.after);
      const bypassed = isBypassed(bypassPatterns, session.sessionId, session.sessionKey);
      out.push({ session, skip: filtered ? "filtered" : bypassed ? "bypassed" : undefined });
    }
  }
  return out;
}

export async function importHistory(opts: ImportOptions, deps: ImportDeps): Promise<ImportSummary> {
  const { host, rt } = deps;
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const now = deps.now ?? Date.now;
  const selected = selectSessions(host, opts, rt.config.bypassSessionPatterns);
  const outcomes: Record<SessionOutcome, number> = {
    imported: 0,
    "would import": 0,
    bypassed: 0,
    filtered: 0,
    empty: 0,
    unreadable: 0,
  };
  const startedAt = now();
  const run = randomUUID();
  const sent: ImportedSession[] = [];
  let messages = 0;
  let nextAllowed = startedAt; // the rate limit: a session's messages spend rate-seconds ahead
  for (const [index, { session, skip }] of selected.entries()) {
    let outcome: SessionOutcome;
    if (skip !== undefined) {
      outcome = skip;
    } else {
      const transcript = await host.read(session);
      if (transcript === undefined) outcome = "unreadable";
      else if (transcript.length === 0) outcome = "empty";
      else if (opts.dryRun) {
        outcome = "would import";
        messages += transcript.length;
        sent.push(imported(session));
      } else {
        await waitForRoom(opts, deps, sleep);
        if (nextAllowed > now()) await sleep(nextAllowed - now());
        const ovSid = ovSessionId(session.sessionId, session.sessionKey);
        rt.publishTurn({
          sessionId: session.sessionId,
          sessionKey: session.sessionKey,
          agentId: session.agentId,
          messages: transcript,
          importTranscript: true,
          importRun: run,
          eventId: `import-${ovSid}`, // bootstrap's id: the same event to capture, whoever sends it
        }, { remember: false }); // no assemble here: a long import holds no transcripts
        sent.push(imported(session));
        // Redis away: the publisher keeps it (and spools it at the end, for the next run)
        await rt.publisher.drainedWithin(DRAIN_WAIT_MS);
        messages += transcript.length;
        outcome = "imported";
        nextAllowed = Math.max(nextAllowed, now()) + (transcript.length / opts.rate) * 1000;
      }
    }
    outcomes[outcome] += 1;
    deps.progress?.({ done: index + 1, total: selected.length, messages, startedAt, session, outcome });
  }
  const summary: ImportSummary = { sessions: selected.length, outcomes, messages, undelivered: rt.publisher.getStats().pending };
  if (deps.outcomes && sent.length > 0) {
    try {
      summary.inOv = await whatCaptureDid(deps.outcomes, opts.dryRun ? DRY_RUN : run, sent, { sleep, now });
    } catch (err) {
      // what was sent stands (capture applies it all the same); only the account of it is missing
      summary.inOvUnknown = (err as Error).message;
    }
  }
  return summary;
}

/** The run a dry run asks about: none (so every session reads as known or not, none as applied). */
const DRY_RUN = "dry-run";

function imported(session: StoredSession): ImportedSession {
  const ovSid = ovSessionId(session.sessionId, session.sessionKey);
  return { sessionId: session.sessionId, sessionKey: session.sessionKey, agentId: session.agentId, eventId: `import-${ovSid}` };
}

/** Ask the service what capture did with `sent` until nothing is pending (a dry run: once). */
async function whatCaptureDid(
  ask: NonNullable<ImportDeps["outcomes"]>,
  run: string,
  sent: ImportedSession[],
  clock: { sleep: (ms: number) => Promise<void>; now: () => number },
): Promise<NonNullable<ImportSummary["inOv"]>> {
  const until = clock.now() + OUTCOME_WAIT_MS;
  let answers: ImportedOutcome[] = [];
  for (;;) {
    answers = [];
    for (let i = 0; i < sent.length; i += OUTCOMES_PAGE) answers.push(...(await ask(run, sent.slice(i, i + OUTCOMES_PAGE))));
    if (run === DRY_RUN || !answers.some((a) => a.outcome === "pending") || clock.now() >= until) break;
    await clock.sleep(OUTCOME_POLL_MS);
  }
  const tally = { written: 0, writtenMessages: 0, partly: 0, partlyMessages: 0, already: 0, pending: 0 };
  for (const a of answers) {
    if (run === DRY_RUN) {
      if (a.known) tally.already += 1;
      else tally.pending += 1; // new to ovstream: what capture would write
      continue;
    }
    if (a.outcome === "written") {
      tally.written += 1;
      tally.writtenMessages += a.messages;
    } else if (a.outcome === "partly") {
      tally.partly += 1;
      tally.partlyMessages += a.messages;
    } else if (a.outcome === "already") tally.already += 1;
    else tally.pending += 1;
  }
  return tally;
}

/** Sessions one ask names at most: the service's own limit (IMPORTS_ASKED_MAX, workers/rpc/imports.py). */
const OUTCOMES_PAGE = 1_000;

/** Until capture's backlog and the commits in flight leave room (live turns go first). */
async function waitForRoom(opts: ImportOptions, deps: ImportDeps, sleep: (ms: number) => Promise<void>): Promise<void> {
  for (;;) {
    const load = await deps.load();
    if (load.backlog <= opts.maxBacklog && load.commitsInFlight <= opts.maxCommits) return;
    await sleep(LOAD_POLL_MS);
  }
}

/** One line of progress: sessions and messages done, the rate, the time left. */
export function progressLine(p: ImportProgress, now: number): string {
  const seconds = Math.max(0.001, (now - p.startedAt) / 1000);
  const perSession = seconds / p.done;
  const eta = Math.round(perSession * (p.total - p.done));
  const bar = "#".repeat(Math.round((20 * p.done) / Math.max(1, p.total))).padEnd(20, ".");
  return (
    `[${bar}] ${p.done}/${p.total} sessions, ${p.messages} messages, ` +
    `${(p.messages / seconds).toFixed(1)} msg/s, ETA ${formatSeconds(eta)}`
  );
}

export function formatSeconds(total: number): string {
  const m = Math.floor(total / 60);
  const s = total % 60;
  return m > 0 ? `${m}m${String(s).padStart(2, "0")}s` : `${s}s`;
}

/** The summary printed at the end. */
export function summaryLines(summary: ImportSummary, dryRun: boolean): string[] {
  const o = summary.outcomes;
  const lines = [
    dryRun
      ? `would send ${o["would import"]} of ${summary.sessions} sessions (${summary.messages} messages); nothing was sent`
      : `sent ${o.imported} of ${summary.sessions} sessions (${summary.messages} messages): ` +
        "capture writes each into OV once, only where OV holds none of it",
  ];
  const c = summary.inOv;
  if (c && dryRun) {
    lines.push(`of those, ${c.pending} new to ovstream (capture would write them), ${c.already} already captured (nothing of them would be written)`);
  } else if (c) {
    lines.push(
      `in OV now: ${c.written} new (${c.writtenMessages} messages written), ${c.partly} partly there before ` +
        `(${c.partlyMessages} written now), ${c.already} already there (nothing written)` +
        (c.pending > 0 ? `, ${c.pending} not applied yet (capture is behind: \`ovstream status\`)` : ""),
    );
  }
  if (summary.inOvUnknown !== undefined) {
    lines.push(`what capture did with them is not known: the service did not say (${summary.inOvUnknown})`);
  }
  const left = (["bypassed", "filtered", "empty", "unreadable"] as const).filter((k) => o[k] > 0);
  if (left.length > 0) lines.push(`left out: ${left.map((k) => `${o[k]} ${k}`).join(", ")}`);
  if (summary.undelivered > 0) {
    lines.push(`${summary.undelivered} event(s) Redis has not taken are kept in the spool: run the import again`);
  }
  return lines;
}
