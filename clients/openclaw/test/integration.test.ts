/**
 * End to end: the plugin's hooks, called as OpenClaw calls them, against a
 * real redis-server and the running Python service (`ovstream up`), with the
 * fake OpenViking served over HTTP (`ovstream fake-ov`) so its state can be
 * read back through the OV route GET /api/v1/sessions/{id}/context.
 *
 * The Python executable is $OVSTREAM_BIN (default ../../.venv/bin/ovstream
 * from clients/openclaw). Without it (or without `up` / `fake-ov`) the test
 * is skipped — unless OVSTREAM_REQUIRE_INTEGRATION=1, then it fails.
 * Every process started here is stopped at the end.
 */

import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";

import { createClient } from "redis";

import { registerOvstream } from "../src/index.js";
import { ovSessionId } from "../src/ids.js";
import { shardOf, streamKey } from "../src/keys.js";
import type { PluginRuntime } from "../src/runtime.js";
import type { AgentMessage, ContextEngine } from "../src/types.js";
import { FakeApi } from "./helpers/fakes.js";
import { freePort, PACKAGE_ROOT, REPO_ROOT, redisServerPath, startRedis, stopChild, track, waitFor, type RedisServer } from "./helpers/proc.js";

const BIN = resolve(PACKAGE_ROOT, process.env.OVSTREAM_BIN ?? "../../.venv/bin/ovstream");
const REQUIRE = process.env.OVSTREAM_REQUIRE_INTEGRATION === "1";
/** An already running fake OV server to use instead of starting `ovstream fake-ov`. */
const EXTERNAL_OV = process.env.OVSTREAM_FAKE_OV_URL?.replace(/\/+$/, "");
const SHARDS = 3;
const PREFIX = "itest";

function commandWorks(args: string[]): boolean {
  if (!existsSync(BIN)) return false;
  const r = spawnSync(BIN, args, { encoding: "utf8", timeout: 60_000 });
  return r.status === 0;
}

function missing(): string | undefined {
  if (!redisServerPath()) return "redis-server is not installed";
  if (!existsSync(BIN)) return `no ovstream executable at ${BIN} (set OVSTREAM_BIN)`;
  if (!commandWorks(["up", "--help"])) return "`ovstream up --help` fails";
  // argparse lists `up` even when its module is missing, so ask Python directly.
  const py = join(dirname(BIN), "python");
  const mods = ["workers.dev.up", "workers.capture.worker"];
  if (!EXTERNAL_OV) mods.push("workers.dev.fake_ov.server");
  for (const mod of mods) {
    const r = spawnSync(existsSync(py) ? py : "python3", ["-c", `import ${mod}`], { cwd: REPO_ROOT, encoding: "utf8", timeout: 60_000 });
    if (r.status !== 0) return `${mod} is not available yet (the Python side of \`ovstream up\` / \`fake-ov\`)`;
  }
  if (!EXTERNAL_OV) {
    const help = spawnSync(BIN, ["fake-ov", "--help"], { encoding: "utf8", timeout: 60_000 });
    if (help.status !== 0 || !help.stdout.includes("--port")) return "`ovstream fake-ov --port N` is not available yet";
  }
  return undefined;
}

const why = missing();
if (why && REQUIRE) {
  throw new Error(`integration test required but cannot run: ${why}`);
}

interface Service {
  child: ChildProcess;
  output: string[];
  name: string;
}

function startService(name: string, args: string[], env: Record<string, string>, cwd: string): Service {
  const output: string[] = [];
  const child = track(
    spawn(BIN, args, {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
      // Its own process group, so stopping it also stops what it forks (RQ work horses).
      detached: true,
    }),
    { group: true },
  );
  const keep = (d: Buffer) => {
    output.push(d.toString());
    if (output.length > 400) output.splice(0, output.length - 400);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  return { child, output, name };
}

async function stopService(svc: Service): Promise<void> {
  const pid = svc.child.pid;
  if (pid !== undefined && svc.child.exitCode === null && svc.child.signalCode === null) {
    const exited = new Promise<void>((res) => svc.child.once("exit", () => res()));
    try {
      process.kill(-pid, "SIGTERM");
    } catch {
      svc.child.kill("SIGTERM");
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise<void>((res) => (timer = setTimeout(res, 10_000)))]);
    clearTimeout(timer);
    if (svc.child.exitCode === null && svc.child.signalCode === null) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        svc.child.kill("SIGKILL");
      }
    }
    await stopChild(svc.child, 1000);
    // Anything the service forked that outlived it (its group has our pid as id).
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // the group is empty
    }
  }
}

function dump(svcs: Service[]): string {
  return svcs.map((s) => `--- ${s.name} (exit ${s.child.exitCode ?? "running"}) ---\n${s.output.join("").slice(-6000)}`).join("\n");
}

async function getJson(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { headers: { accept: "application/json", ...headers } });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body };
}

/** The text of each OV message part, as [role, text] pairs, in order. */
function textsOf(ovMessages: Array<{ role: string; parts?: Array<Record<string, unknown>> }>): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const m of ovMessages) {
    for (const p of m.parts ?? []) {
      if (p.type === "text" && typeof p.text === "string") out.push([m.role, p.text]);
    }
  }
  return out;
}

const SESSION_ID = "conv-7f3a";
const SESSION_KEY = "agent:main:telegram:direct:4242";

describe("integration: plugin -> Redis Streams -> ovstream up -> fake OV", { skip: why ?? false }, () => {
  let redis: RedisServer;
  let up: Service;
  let rt: PluginRuntime;
  let engine: ContextEngine;
  let api: FakeApi;
  let fakeOvUrl = "";
  let workdir = "";
  const services: Service[] = [];

  before(async () => {
    workdir = mkdtempSync(join(tmpdir(), "ovstream-it-"));
    redis = await startRedis();
    const ovPort = await freePort();
    const rpcPort = await freePort();
    fakeOvUrl = EXTERNAL_OV ?? `http://127.0.0.1:${ovPort}`;
    const env = {
      OVSTREAM_REDIS_URL: redis.url,
      OVSTREAM_RPC_HOST: "127.0.0.1",
      OVSTREAM_RPC_PORT: String(rpcPort),
      OVSTREAM_SHARDS: String(SHARDS),
      OVSTREAM_KEY_PREFIX: PREFIX,
      OVSTREAM_BASE_URL: fakeOvUrl,
      OVSTREAM_CAPTURE_BLOCK_MS: "200",
      PYTHONUNBUFFERED: "1",
    };
    if (!EXTERNAL_OV) {
      const fakeOv = startService("ovstream fake-ov", ["fake-ov", "--host", "127.0.0.1", "--port", String(ovPort)], env, workdir);
      services.push(fakeOv);
      await waitFor("the fake OV server", async () => {
        if (fakeOv.child.exitCode !== null) throw new Error(`fake-ov exited:\n${dump([fakeOv])}`);
        return (await getJson(`${fakeOvUrl}/health`)).status === 200;
      }, 60_000, 100);
    }
    up = startService("ovstream up", ["up"], env, workdir);
    services.push(up);
    await waitFor("the ovstream RPC", async () => {
      if (up.child.exitCode !== null) throw new Error(`ovstream up exited:\n${dump([up])}`);
      return (await getJson(`http://127.0.0.1:${rpcPort}/healthz`)).status === 200;
    }, 90_000, 100);

    api = new FakeApi({
      redisUrl: redis.url,
      rpcUrl: `http://127.0.0.1:${rpcPort}`,
      shards: SHARDS,
      keyPrefix: PREFIX,
      rpcTimeoutMs: 20_000,
    });
    rt = registerOvstream(api)!;
    assert.ok(rt, api.logger.lines.map((l) => l.message).join("\n"));
    engine = await api.engine();

    // Events are only safe to publish once capture's group exists (it may be
    // created at "$", which would skip what was written before it).
    const admin = createClient({ url: redis.url });
    admin.on("error", () => {});
    await admin.connect();
    try {
      await waitFor("capture consumer groups on every shard", async () => {
        for (let s = 0; s < SHARDS; s++) {
          const key = streamKey(PREFIX, s);
          if ((await admin.exists(key)) === 0) return false;
          const groups = (await admin.sendCommand(["XINFO", "GROUPS", key])) as unknown[];
          if (!Array.isArray(groups) || groups.length === 0) return false;
        }
        return true;
      }, 60_000, 100);
    } finally {
      await admin.close();
    }
  });

  after(async () => {
    if (rt) await rt.close(2000);
    for (const svc of services.reverse()) await stopService(svc);
    if (redis) await redis.stop();
    if (workdir) rmSync(workdir, { recursive: true, force: true });
  });

  it("captures a three-turn conversation, in order, into the fake OV session", async (t) => {
    const ovSid = ovSessionId(SESSION_ID, SESSION_KEY);
    const turns: Array<{ user: string; reply: AgentMessage[] }> = [
      {
        user: "My name is Ada and I live in Lisbon.",
        reply: [{ role: "assistant", content: [{ type: "text", text: "Nice to meet you, Ada." }], stopReason: "stop" }],
      },
      {
        user: "What files are in my project?",
        reply: [
          { role: "assistant", content: [{ type: "toolCall", id: "call_1", name: "ls", arguments: { path: "." } }], stopReason: "toolUse" },
          { role: "toolResult", toolCallId: "call_1", toolName: "ls", content: [{ type: "text", text: "README.md\nsrc/" }], isError: false },
          { role: "assistant", content: [{ type: "text", text: "You have README.md and a src folder." }], stopReason: "stop" },
        ],
      },
      {
        user: "Where do I live?",
        reply: [{ role: "assistant", content: [{ type: "text", text: "You live in Lisbon." }], stopReason: "stop" }],
      },
    ];

    let transcript: AgentMessage[] = [];
    const base = 1_760_000_000_000;
    for (const [i, turn] of turns.entries()) {
      // 1. The main assemble: history before the turn, with the prompt.
      const main = await engine.assemble({
        sessionId: SESSION_ID,
        sessionKey: SESSION_KEY,
        messages: transcript,
        tokenBudget: 128_000,
        availableTools: new Set(["memory_recall", "ls"]),
        model: "test-model",
        prompt: turn.user,
      });
      assert.ok(Array.isArray(main.messages) && typeof main.estimatedTokens === "number");
      // 2. The per-LLM-call transform-context assemble: the user turn is last.
      const userMsg: AgentMessage = { role: "user", content: turn.user, timestamp: base + i * 10_000 };
      const inTurn = [...transcript, userMsg];
      const transform = await engine.assemble({ sessionId: SESSION_ID, sessionKey: SESSION_KEY, messages: inTurn, tokenBudget: 128_000 });
      assert.ok(Array.isArray(transform.messages) && transform.messages.length >= 1);
      // 3. afterTurn with the grown transcript.
      const pre = transcript.length;
      transcript = [...inTurn, ...turn.reply.map((m, j) => ({ ...m, timestamp: base + i * 10_000 + 1000 + j }))];
      await engine.afterTurn({
        sessionId: SESSION_ID,
        sessionKey: SESSION_KEY,
        sessionFile: "/tmp/none.jsonl",
        messages: transcript,
        prePromptMessageCount: pre,
        tokenBudget: 128_000,
        runtimeContext: { agentId: "main" },
      });
    }
    await rt.publisher.drained();
    assert.equal(rt.publisher.getStats().delivered, 3);

    // The three events sit on the shard both sides compute.
    const admin = createClient({ url: redis.url });
    admin.on("error", () => {});
    await admin.connect();
    try {
      assert.equal(await admin.xLen(streamKey(PREFIX, shardOf(ovSid, SHARDS))), 3);
    } finally {
      await admin.close();
    }

    const expected: Array<[string, string]> = [
      ["user", turns[0]!.user],
      ["assistant", "Nice to meet you, Ada."],
      ["user", turns[1]!.user],
      ["assistant", "You have README.md and a src folder."],
      ["user", turns[2]!.user],
      ["assistant", "You live in Lisbon."],
    ];
    const ovHeaders = { "X-OpenViking-Account": "default", "X-OpenViking-User": "default" };
    let last: unknown;
    const context = await waitFor("the captured messages in the fake OV", async () => {
      const r = await getJson(`${fakeOvUrl}/api/v1/sessions/${encodeURIComponent(ovSid)}/context?token_budget=128000`, ovHeaders);
      last = r;
      if (r.status !== 200) return false;
      const msgs = r.body?.result?.messages as Array<{ role: string; parts?: Array<Record<string, unknown>> }> | undefined;
      if (!Array.isArray(msgs) || textsOf(msgs).length < expected.length) return false;
      return msgs;
    }, 60_000, 200).catch((err: Error) => {
      throw new Error(`${err.message}\nlast answer: ${JSON.stringify(last)}\n${dump(services)}`);
    });
    t.diagnostic(`fake OV holds ${context.length} messages for ${ovSid}`);
    assert.deepEqual(textsOf(context), expected);
    // The tool call of turn 2 rides on a tool part between the user and the answer.
    const toolParts = context.flatMap((m) => (m.parts ?? []).filter((p) => p.type === "tool"));
    assert.equal(toolParts.length, 1, JSON.stringify(context));
    assert.equal(toolParts[0]!.tool_name, "ls");
    const roles = context.map((m) => m.role);
    assert.equal(roles[0], "user");
  });

  it("assembles the next turn from what OV now holds", async () => {
    // The snapshot assemble reads is refreshed by capture right after its OV
    // write, so it may trail the OV read above by a moment: wait for it.
    const res = await waitFor("an assemble carrying all three turns", async () => {
      const r = await engine.assemble({
        sessionId: SESSION_ID,
        sessionKey: SESSION_KEY,
        messages: [],
        tokenBudget: 128_000,
        availableTools: new Set(["memory_recall"]),
        prompt: "And what is my name?",
      });
      const text = JSON.stringify(r.messages);
      return text.includes("My name is Ada") && text.includes("You live in Lisbon.") ? r : false;
    }, 30_000, 200);
    assert.ok(res.estimatedTokens > 0);
    assert.equal(rt.publisher.getStats().failures, 0);
  });

  it("compacts through the RPC: the session is archived", async (t) => {
    const res = await engine.compact({ sessionId: SESSION_ID, sessionKey: SESSION_KEY, tokenBudget: 128_000, force: true });
    t.diagnostic(`compact: ${JSON.stringify(res).slice(0, 300)}`);
    assert.equal(res.ok, true, JSON.stringify(res));
    assert.equal(res.compacted, true, JSON.stringify(res));
    assert.ok(res.result && res.result.summary && res.result.summary.includes("Lisbon"), JSON.stringify(res));
  });

  it("finds the archived messages with a tool call through the RPC", async (t) => {
    const tool = api.tool("ov_archive_search", { sessionId: SESSION_ID, sessionKey: SESSION_KEY, agentId: "main" });
    const result = await tool.execute("call-9", { query: "Lisbon" });
    t.diagnostic(`ov_archive_search: ${JSON.stringify(result).slice(0, 300)}`);
    assert.notEqual(result.details.action, "error", JSON.stringify(result));
    assert.equal(result.content[0]!.type, "text");
    assert.match(result.content[0]!.text, /I live in Lisbon/);
  });

  it("assembles after the compaction with the archive summary first", async () => {
    const res = await engine.assemble({
      sessionId: SESSION_ID,
      sessionKey: SESSION_KEY,
      messages: [],
      tokenBudget: 128_000,
      availableTools: new Set(["memory_recall"]),
      prompt: "Remind me where I live",
    });
    const first = JSON.stringify(res.messages[0] ?? null);
    assert.ok(first.includes("[Session History Summary]") && first.includes("Lisbon"), JSON.stringify(res.messages).slice(0, 2000));
  });
});
