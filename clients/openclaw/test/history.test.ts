import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { createClient } from "redis";

import { configuredAgents, importOptions, parseWhen, registerCli } from "../src/cli.js";
import { parseConfig, type PluginConfig } from "../src/config.js";
import {
  importHistory,
  progressLine,
  selectSessions,
  summaryLines,
  type HostSessions,
  type ImportOptions,
  type StoredSession,
} from "../src/history.js";
import { ovSessionId } from "../src/ids.js";
import { shardOf, streamKey } from "../src/keys.js";
import { PluginRuntime } from "../src/runtime.js";
import type { AgentMessage, CliCommand, PluginApi } from "../src/types.js";
import { MemoryLogger } from "./helpers/fakes.js";
import { freePort, PACKAGE_ROOT, startRedis, streamEvents, track, type RedisServer } from "./helpers/proc.js";

const DAY = 86_400_000;
const NOW = Date.parse("2026-12-01T00:00:00Z");

function say(text: string): AgentMessage[] {
  return [
    { role: "user", content: text },
    { role: "assistant", content: [{ type: "text", text: `ok: ${text}` }] },
  ];
}

class FakeHost implements HostSessions {
  constructor(
    readonly sessions: StoredSession[],
    readonly transcripts: Record<string, AgentMessage[] | undefined>,
  ) {}
  agents(): string[] {
    return [...new Set(this.sessions.map((s) => s.agentId))];
  }
  list(agentId: string): StoredSession[] {
    return this.sessions.filter((s) => s.agentId === agentId);
  }
  async read(s: StoredSession): Promise<AgentMessage[] | undefined> {
    return this.transcripts[s.sessionKey];
  }
}

const SESSIONS: StoredSession[] = [
  { agentId: "main", sessionKey: "agent:main:telegram:direct:1", sessionId: "s-old", updatedAt: NOW - 60 * DAY },
  { agentId: "main", sessionKey: "agent:main:scratch", sessionId: "s-new", updatedAt: NOW - DAY },
  { agentId: "helper", sessionKey: "agent:helper:main", sessionId: "s-helper", updatedAt: NOW - 10 * DAY },
  { agentId: "helper", sessionKey: "agent:helper:cron:nightly", sessionId: "s-cron", updatedAt: NOW - 2 * DAY },
  { agentId: "helper", sessionKey: "agent:helper:empty", sessionId: "s-empty", updatedAt: NOW - 2 * DAY },
  { agentId: "helper", sessionKey: "agent:helper:gone", sessionId: "s-gone", updatedAt: NOW - 2 * DAY },
];
const TRANSCRIPTS: Record<string, AgentMessage[] | undefined> = {
  "agent:main:telegram:direct:1": [...say("I moved to Lisbon"), ...say("I like green tea")],
  "agent:main:scratch": say("scratch"),
  "agent:helper:main": say("helper things"),
  "agent:helper:cron:nightly": say("nightly"),
  "agent:helper:empty": [],
  "agent:helper:gone": undefined,
};

function options(overrides: Partial<ImportOptions> = {}): ImportOptions {
  return { rate: 1e9, maxBacklog: 50, maxCommits: 8, dryRun: false, ...overrides };
}

describe("selectSessions", () => {
  const host = new FakeHost(SESSIONS, TRANSCRIPTS);
  const picked = (opts: Parameters<typeof selectSessions>[1], bypass: string[] = []) =>
    selectSessions(host, opts, bypass)
      .filter((s) => s.skip === undefined)
      .map((s) => s.session.sessionId);

  it("takes every agent's sessions, or the chosen agents'", () => {
    assert.deepEqual(picked({}), ["s-old", "s-new", "s-helper", "s-cron", "s-empty", "s-gone"]);
    assert.deepEqual(picked({ agents: ["helper"] }), ["s-helper", "s-cron", "s-empty", "s-gone"]);
  });

  it("filters by key and by age, and says why a session is left out", () => {
    assert.deepEqual(picked({ match: /telegram|scratch/ }), ["s-old", "s-new"]);
    assert.deepEqual(picked({ before: NOW - 30 * DAY }), ["s-old"]);
    assert.deepEqual(picked({ after: NOW - 5 * DAY }), ["s-new", "s-cron", "s-empty", "s-gone"]);
    const skips = selectSessions(host, { match: /main/ }, ["agent:*:cron:**"]).map((s) => s.skip);
    assert.deepEqual(skips, [undefined, undefined, undefined, "filtered", "filtered", "filtered"]);
  });

  it("honours bypassSessionPatterns as capture does", () => {
    const skipped = selectSessions(host, {}, ["agent:*:cron:**"]).filter((s) => s.skip === "bypassed");
    assert.deepEqual(
      skipped.map((s) => s.session.sessionId),
      ["s-cron"],
    );
  });
});

describe("importHistory", () => {
  let redis: RedisServer;
  const runtimes: PluginRuntime[] = [];
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const rt of runtimes) await rt.close(50);
    await redis.stop();
  });

  function runtime(overrides: Partial<PluginConfig> = {}): PluginRuntime {
    const cfg = parseConfig({
      redisUrl: redis.url,
      stateDir: mkdtempSync(join(tmpdir(), "ovstream-history-")),
      keyPrefix: `h${runtimes.length}`,
      ...overrides,
    });
    const rt = new PluginRuntime(cfg, new MemoryLogger(), { publisher: { initialBackoffMs: 20, maxBackoffMs: 200 } });
    runtimes.push(rt);
    return rt;
  }

  async function published(rt: PluginRuntime) {
    const events = [];
    for (let shard = 0; shard < rt.config.shards; shard++) {
      events.push(...(await streamEvents(redis.url, streamKey(rt.config.keyPrefix, shard))));
    }
    return events;
  }

  it("publishes each session's transcript once, as bootstrap's import event on its shard", async () => {
    const rt = runtime({ bypassSessionPatterns: ["agent:*:cron:**"] });
    const host = new FakeHost(SESSIONS, TRANSCRIPTS);
    const seen: string[] = [];
    const summary = await importHistory(options(), {
      host,
      rt,
      load: async () => ({ backlog: 0, commitsInFlight: 0 }),
      progress: (p) => seen.push(`${p.done}/${p.total} ${p.session.sessionId} ${p.outcome}`),
    });
    assert.deepEqual(summary.outcomes, { imported: 3, "would import": 0, bypassed: 1, filtered: 0, empty: 1, unreadable: 1 });
    assert.equal(summary.messages, 8);
    assert.equal(seen.length, 6);
    assert.equal(seen[3], "4/6 s-cron bypassed");
    const events = await published(rt);
    assert.equal(events.length, 3);
    for (const s of SESSIONS.filter((s) => ["s-old", "s-new", "s-helper"].includes(s.sessionId))) {
      const ovSid = ovSessionId(s.sessionId, s.sessionKey);
      const own = events.filter((e) => e.event_id === `import-${ovSid}`);
      assert.equal(own.length, 1, s.sessionId);
      assert.equal(own[0]!.import_transcript, true);
      assert.deepEqual(own[0]!.messages, TRANSCRIPTS[s.sessionKey]);
      const onShard = await streamEvents(redis.url, streamKey(rt.config.keyPrefix, shardOf(ovSid, rt.config.shards)));
      assert.ok(onShard.some((e) => e.event_id === `import-${ovSid}`));
      assert.deepEqual(rt.turnsFor(ovSid).recent, [], "the import keeps no transcript for an overlay");
    }
  });

  it("sends nothing on a dry run, and says what it would import", async () => {
    const rt = runtime();
    const summary = await importHistory(options({ dryRun: true }), {
      host: new FakeHost(SESSIONS, TRANSCRIPTS),
      rt,
      load: async () => {
        throw new Error("a dry run asks the service nothing");
      },
    });
    assert.equal(summary.outcomes["would import"], 4);
    assert.equal((await published(rt)).length, 0);
    assert.match(summaryLines(summary, true)[0]!, /^would send 4 of 6 sessions \(10 messages\); nothing was sent$/);
  });

  it("says what capture did with what it sent: new to OV, partly there, already there, not applied yet", async () => {
    const rt = runtime({ bypassSessionPatterns: ["agent:*:cron:**"] });
    const asked: Array<{ run: string; ids: string[] }> = [];
    const answers = [
      // the first ask: one still pending; the second: all applied
      ["written:5", "already:0", "pending:0"],
      ["written:5", "already:0", "partly:2"],
    ];
    let clock = NOW;
    const summary = await importHistory(options(), {
      host: new FakeHost(SESSIONS, TRANSCRIPTS),
      rt,
      load: async () => ({ backlog: 0, commitsInFlight: 0 }),
      now: () => clock,
      sleep: async (ms) => void (clock += ms),
      outcomes: async (run, sessions) => {
        asked.push({ run, ids: sessions.map((s) => s.eventId) });
        const said = answers.shift() ?? [];
        return sessions.map((s, i) => {
          const [outcome, messages] = (said[i] ?? "pending:0").split(":");
          return { eventId: s.eventId, outcome: outcome as "written", messages: Number(messages) };
        });
      },
    });
    assert.equal(asked.length, 2, "asked again while one was pending");
    assert.equal(asked[0]!.ids.length, 3);
    assert.equal(new Set(asked.map((a) => a.run)).size, 1);
    const events = await published(rt);
    assert.ok(events.every((e) => e.import_run === asked[0]!.run), "each event names the run that asks");
    assert.deepEqual(summary.inOv, { written: 1, writtenMessages: 5, partly: 1, partlyMessages: 2, already: 1, pending: 0 });
    const lines = summaryLines(summary, false);
    assert.match(lines[0]!, /^sent 3 of 6 sessions \(8 messages\)/);
    assert.equal(lines[1], "in OV now: 1 new (5 messages written), 1 partly there before (2 written now), 1 already there (nothing written)");
  });

  it("on a dry run, says which sessions capture already knows", async () => {
    const rt = runtime();
    const summary = await importHistory(options({ dryRun: true }), {
      host: new FakeHost(SESSIONS, TRANSCRIPTS),
      rt,
      load: async () => {
        throw new Error("a dry run asks the service nothing of its load");
      },
      outcomes: async (_run, sessions) =>
        sessions.map((s, i) => ({ eventId: s.eventId, outcome: "pending" as const, messages: 0, known: i === 0 })),
    });
    assert.deepEqual(summary.inOv, { written: 0, writtenMessages: 0, partly: 0, partlyMessages: 0, already: 1, pending: 3 });
    assert.equal(
      summaryLines(summary, true)[1],
      "of those, 3 new to ovstream (capture would write them), 1 already captured (nothing of them would be written)",
    );
  });

  it("waits while capture has a backlog or commits are in flight, and keeps to its rate", async () => {
    const rt = runtime();
    const loads = [
      { backlog: 500, commitsInFlight: 0 },
      { backlog: 10, commitsInFlight: 20 },
      { backlog: 10, commitsInFlight: 2 },
    ];
    let clock = NOW;
    const sleeps: number[] = [];
    const host = new FakeHost(SESSIONS.slice(0, 3), TRANSCRIPTS);
    await importHistory(options({ rate: 4, maxBacklog: 50, maxCommits: 8 }), {
      host,
      rt,
      load: async () => loads.shift() ?? { backlog: 0, commitsInFlight: 0 },
      now: () => clock,
      sleep: async (ms) => {
        sleeps.push(ms);
        clock += ms;
      },
    });
    // two polls while the service was busy, then one second of rate per 4 messages sent
    assert.deepEqual(sleeps.slice(0, 2), [500, 500]);
    assert.deepEqual(sleeps.slice(2), [1000, 500]);
    assert.equal((await published(rt)).length, 3);
  });
});

describe("the command", () => {
  it("reads its flags, refusing bad ones with a message", () => {
    const o = importOptions({ agent: ["main"], match: "^agent:main:", before: "30d", rate: "50" }, NOW);
    assert.deepEqual(o.agents, ["main"]);
    assert.equal(o.before, NOW - 30 * DAY);
    assert.equal(o.rate, 50);
    assert.equal(o.dryRun, false);
    assert.throws(() => importOptions({ rate: "fast" }), /--rate wants a positive number, got "fast"/);
    assert.throws(() => importOptions({ match: "(" }), /--match: /);
    assert.throws(() => importOptions({ after: "last tuesday-ish" }), /not an age \(30d, 12h\) or a date/);
    assert.equal(parseWhen("2026-01-02T00:00:00Z"), Date.parse("2026-01-02T00:00:00Z"));
    assert.equal(parseWhen("12h", NOW), NOW - DAY / 2);
  });

  it("is `openclaw ovstream import`, registered with a descriptor for the host's lazy CLI", () => {
    const tree: string[] = [];
    const node = (path: string): CliCommand => ({
      command: (name) => {
        tree.push(`${path}${name}`);
        return node(`${path}${name} `);
      },
      description: function () {
        return this;
      },
      option: function (flags) {
        tree.push(`${path.trim()} ${flags}`);
        return this;
      },
      action: function () {
        return this;
      },
    });
    let descriptors: unknown;
    const api: PluginApi = {
      logger: new MemoryLogger(),
      registerCli: (registrar, opts) => {
        descriptors = opts?.descriptors;
        void registrar({ program: node("") });
      },
    };
    registerCli(api, {} as PluginRuntime);
    assert.deepEqual(descriptors, [
      { name: "ovstream", description: "ovstream: bring this gateway's stored conversations into OpenViking", hasSubcommands: true },
    ]);
    assert.ok(tree.includes("ovstream"));
    assert.ok(tree.includes("ovstream import"));
    assert.ok(tree.includes("ovstream import --dry-run"));
  });

  /** test/helpers/import-child.ts run to its end: its exit code and the summary it printed. */
  async function importProcess(redisUrl: string, stateDir: string): Promise<{ code: number | null; summary: { undelivered: number } }> {
    const child = track(
      spawn(process.execPath, [join(PACKAGE_ROOT, "dist/test/helpers/import-child.js"), redisUrl, stateDir, '{"json":true}'], {
        stdio: ["ignore", "pipe", "pipe"],
      }),
    );
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    // A hang is the failure looked for: past a minute the child is killed and the test fails.
    const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    const [code, signal] = (await new Promise((resolve) => child.once("exit", (...end) => resolve(end)))) as [number | null, string | null];
    clearTimeout(killer);
    assert.equal(signal, null, `the import process did not exit by itself once done:\n${stdout}\n${stderr}`);
    assert.match(stderr, /exitCode=/, stderr);
    return { code, summary: JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") };
  }

  function spoolOneEvent(stateDir: string, key: string): string {
    const spool = join(stateDir, "spool");
    mkdirSync(spool, { recursive: true });
    const payload = JSON.stringify({ event_id: "left-by-an-earlier-run" });
    writeFileSync(join(spool, "000001700000000000-1-1.json"), JSON.stringify({ key, payload }));
    return payload;
  }

  it("exits once done, though the host registered it twice and both delivered an earlier run's spool", async () => {
    const redis = await startRedis();
    try {
      const stateDir = mkdtempSync(join(tmpdir(), "ovstream-import-cli-"));
      const key = streamKey("ovstream", 0);
      const payload = spoolOneEvent(stateDir, key);
      const run = await importProcess(redis.url, stateDir);
      assert.equal(run.code, 0);
      assert.equal(run.summary.undelivered, 0);
      assert.deepEqual(readdirSync(join(stateDir, "spool")), []);
      const client = createClient({ url: redis.url });
      client.on("error", () => {});
      await client.connect();
      const entries = await client.xRange(key, "-", "+");
      await client.close();
      assert.ok(entries.length >= 1 && entries.every((e) => e.message.e === payload), JSON.stringify(entries));
    } finally {
      await redis.stop();
    }
  });

  it("exits 1 with Redis away, counting a spooled event once though both registrations hold it", async () => {
    const stateDir = mkdtempSync(join(tmpdir(), "ovstream-import-cli-"));
    spoolOneEvent(stateDir, streamKey("ovstream", 0));
    const run = await importProcess(`redis://127.0.0.1:${await freePort()}/0`, stateDir);
    assert.equal(run.code, 1);
    assert.equal(run.summary.undelivered, 1);
    assert.equal(readdirSync(join(stateDir, "spool")).length, 1, "kept for the next run");
  });

  it("finds the configured agents in 2026.9's keyed entries and in an older list", () => {
    assert.deepEqual(configuredAgents({ agents: { entries: { main: { default: true }, work: {} } } }), ["main", "work"]);
    assert.deepEqual(configuredAgents({ agents: { list: [{ id: "main" }, { id: "helper" }] } }), ["main", "helper"]);
    assert.deepEqual(configuredAgents({}), ["main"]);
  });

  it("draws progress with a rate and a time left", () => {
    const line = progressLine(
      { done: 5, total: 20, messages: 100, startedAt: NOW, session: SESSIONS[0]!, outcome: "imported" },
      NOW + 10_000,
    );
    assert.equal(line, "[#####...............] 5/20 sessions, 100 messages, 10.0 msg/s, ETA 30s");
  });
});
