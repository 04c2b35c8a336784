/**
 * The plugin's commands in the host's CLI: `openclaw ovstream import` (src/history.ts).
 */

import { readTranscript } from "./engine.js";
import {
  IMPORT_DEFAULTS,
  type ImportDeps,
  type ImportedOutcome,
  importHistory,
  progressLine,
  summaryLines,
  type HostSessions,
  type ImportOptions,
  type ServiceLoad,
  type StoredSession,
} from "./history.js";
import { closeOpenRuntimes, type PluginRuntime } from "./runtime.js";
import type { PluginApi } from "./types.js";

import { CLI_ROOT } from "./registration.js";

export { CLI_ROOT };
export const CLI_DESCRIPTION = "ovstream: bring this gateway's stored conversations into OpenViking";

/** The host's session list and transcripts, through its plugin runtime and SDK. */
export function hostSessions(api: PluginApi): HostSessions {
  const session = api.runtime?.agent?.session;
  return {
    agents() {
      return configuredAgents(api.config);
    },
    list(agentId: string): StoredSession[] {
      if (typeof session?.listSessionEntries !== "function") {
        throw new Error("this OpenClaw has no runtime.agent.session.listSessionEntries (2026.9 or newer is needed)");
      }
      return session.listSessionEntries({ agentId, readOnly: true }).flatMap((row) => {
        const sessionId = row.entry?.sessionId;
        if (typeof sessionId !== "string" || !sessionId) return [];
        const updatedAt = typeof row.entry?.updatedAt === "number" ? row.entry.updatedAt : undefined;
        return [{ agentId, sessionKey: row.sessionKey, sessionId, updatedAt }];
      });
    },
    read: (s) => readTranscript({ agentId: s.agentId, sessionKey: s.sessionKey, sessionId: s.sessionId }),
  };
}

/** The agent ids of the host's config: `agents.entries` (keyed, 2026.9) or `agents.list`
 * (older configs, which 2026.9 migrates); "main" when it names none. */
export function configuredAgents(config: unknown): string[] {
  const agents = (config as { agents?: { entries?: unknown; list?: unknown } } | undefined)?.agents;
  const ids = new Set<string>();
  if (agents?.entries && typeof agents.entries === "object") {
    for (const [id, entry] of Object.entries(agents.entries as Record<string, { id?: unknown }>)) {
      ids.add(typeof entry?.id === "string" && entry.id ? entry.id : id);
    }
  }
  if (Array.isArray(agents?.list)) {
    for (const entry of agents.list as Array<{ id?: unknown }>) {
      if (typeof entry?.id === "string" && entry.id) ids.add(entry.id);
    }
  }
  return ids.size > 0 ? [...ids] : ["main"];
}

/** Capture's backlog and the commits in flight, as the RPC's `/v1/scaling` says. */
export function serviceLoad(rt: PluginRuntime): () => Promise<ServiceLoad> {
  return async () => {
    type Scaling = { capture?: { backlog?: number }; commits?: { inFlight?: number } };
    const scaling = await rt.rpc.get<Scaling>("/v1/scaling", { timeoutMs: 10_000 });
    return { backlog: scaling.capture?.backlog ?? 0, commitsInFlight: scaling.commits?.inFlight ?? 0 };
  };
}

/** What capture did with a run's imports: the RPC's `POST /v1/import/outcomes`. */
export function importOutcomes(rt: PluginRuntime): NonNullable<ImportDeps["outcomes"]> {
  return async (run, sessions) => {
    const answer = await rt.rpc.post<{ outcomes: ImportedOutcome[] }>("/v1/import/outcomes", { run, sessions }, { timeoutMs: 30_000 });
    return answer.outcomes;
  };
}

/** `--before 30d`, `--after 2026-01-01`: an age (s, m, h, d ago) or a date; ms since the epoch. */
export function parseWhen(text: string, now = Date.now()): number {
  const age = /^(\d+(?:\.\d+)?)([smhd])$/.exec(text.trim());
  if (age) {
    const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[age[2] as "s" | "m" | "h" | "d"];
    return now - Number(age[1]) * unit;
  }
  const at = Date.parse(text);
  if (Number.isNaN(at)) throw new Error(`not an age (30d, 12h) or a date: ${JSON.stringify(text)}`);
  return at;
}

export interface ImportFlags {
  agent?: string[];
  match?: string;
  before?: string;
  after?: string;
  rate?: string;
  maxBacklog?: string;
  maxCommits?: string;
  dryRun?: boolean;
  json?: boolean;
}

/** The flags as options; throws with a message for a bad one. */
export function importOptions(flags: ImportFlags, now = Date.now()): ImportOptions {
  const positive = (name: string, value: string | undefined, fallback: number): number => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} wants a positive number, got ${JSON.stringify(value)}`);
    return n;
  };
  let match: RegExp | undefined;
  if (flags.match !== undefined) {
    try {
      match = new RegExp(flags.match);
    } catch (err) {
      throw new Error(`--match: ${(err as Error).message}`);
    }
  }
  return {
    agents: flags.agent,
    match,
    before: flags.before === undefined ? undefined : parseWhen(flags.before, now),
    after: flags.after === undefined ? undefined : parseWhen(flags.after, now),
    rate: positive("rate", flags.rate, IMPORT_DEFAULTS.rate),
    maxBacklog: positive("max-backlog", flags.maxBacklog, IMPORT_DEFAULTS.maxBacklog),
    maxCommits: positive("max-commits", flags.maxCommits, IMPORT_DEFAULTS.maxCommits),
    dryRun: flags.dryRun === true,
  };
}

export async function runImportCommand(api: PluginApi, rt: PluginRuntime, flags: ImportFlags): Promise<number> {
  // The publisher's timers keep no process alive (a host shutting down must not wait for
  // them); this command must, until it has said what became of the import.
  const hold = setInterval(() => undefined, 60_000);
  try {
    return await importCommand(api, rt, flags);
  } finally {
    clearInterval(hold);
  }
}

async function importCommand(api: PluginApi, rt: PluginRuntime, flags: ImportFlags): Promise<number> {
  let opts: ImportOptions;
  try {
    opts = importOptions(flags);
  } catch (err) {
    process.stderr.write(`openclaw ovstream import: ${(err as Error).message}\n`);
    await closeOpenRuntimes(2_000); // an earlier run's spool may be on its way: exit all the same
    return 2;
  }
  const tty = process.stderr.isTTY === true;
  try {
    const summary = await importHistory(opts, {
      host: hostSessions(api),
      rt,
      load: serviceLoad(rt),
      outcomes: importOutcomes(rt),
      progress: (p) => {
        const line = `${progressLine(p, Date.now())}  ${p.session.agentId}/${p.session.sessionKey}: ${p.outcome}`;
        process.stderr.write(tty ? `\r\x1b[K${line}` : `${line}\n`);
      },
    });
    if (tty) process.stderr.write("\n");
    summary.undelivered = await closeOpenRuntimes(10_000);
    process.stdout.write(flags.json ? `${JSON.stringify(summary)}\n` : `${summaryLines(summary, opts.dryRun).join("\n")}\n`);
    return summary.undelivered > 0 ? 1 : 0;
  } catch (err) {
    if (tty) process.stderr.write("\n");
    process.stderr.write(`openclaw ovstream import: ${(err as Error).message}\n`);
    await closeOpenRuntimes(2_000);
    return 1;
  }
}

/** Adds `openclaw ovstream import` to the host's CLI. */
export function registerCli(api: PluginApi, rt: PluginRuntime): void {
  if (typeof api.registerCli !== "function") return;
  api.registerCli(
    ({ program }) => {
      const root = program.command(CLI_ROOT).description(CLI_DESCRIPTION);
      root
        .command("import")
        .description("Import the stored sessions of this gateway's agents into OV, exactly once, paced behind live turns")
        .option("--agent <id...>", "only these agents (default: every configured agent)")
        .option("--match <regex>", "only sessions whose key matches")
        .option("--before <age|date>", "only sessions last active before (30d: thirty days ago; or a date)")
        .option("--after <age|date>", "only sessions last active after")
        .option("--rate <messages/s>", `messages sent per second at most (default ${IMPORT_DEFAULTS.rate})`)
        .option("--max-backlog <turns>", `wait while capture has more to apply (default ${IMPORT_DEFAULTS.maxBacklog})`)
        .option("--max-commits <n>", `wait while more commits are in flight (default ${IMPORT_DEFAULTS.maxCommits})`)
        .option("--dry-run", "say what would be imported; send nothing")
        .option("--json", "print the summary as JSON")
        .action(async (flags: ImportFlags) => {
          process.exitCode = await runImportCommand(api, rt, flags);
        });
    },
    { descriptors: [{ name: CLI_ROOT, description: CLI_DESCRIPTION, hasSubcommands: true }] },
  );
}
