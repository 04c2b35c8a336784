import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { parseConfig } from "../src/config.js";
import { createEngine } from "../src/engine.js";
import { streamKey } from "../src/keys.js";
import { PluginRuntime } from "../src/runtime.js";
import type { AgentMessage } from "../src/types.js";
import { FakeRpc, json, MemoryLogger } from "./helpers/fakes.js";
import { startRedis, streamEvents, type RedisServer } from "./helpers/proc.js";

const PARENT = "11111111-1111-4111-8111-111111111111";
const CHILD = "22222222-2222-4222-8222-222222222222";
const PARENT_KEY = "agent:main:main";
const CHILD_KEY = "agent:main:subagent:helper";
const copy: AgentMessage[] = [
  { role: "user", content: "parent question" },
  { role: "assistant", content: [{ type: "text", text: "parent answer" }] },
];

describe("subagents", () => {
  let redis: RedisServer;
  let rpc: FakeRpc;
  const runtimes: PluginRuntime[] = [];
  before(async () => {
    redis = await startRedis();
    rpc = await new FakeRpc((req, res) => {
      if (req.path === "/v1/assemble") json(res, 200, { messages: [], estimatedTokens: 0 });
      else json(res, 200, { ok: true });
    }).start();
  });
  after(async () => {
    for (const rt of runtimes) await rt.close(100);
    await rpc.stop();
    await redis.stop();
  });

  function engineFor(prefix: string) {
    const cfg = parseConfig({
      stateDir: mkdtempSync(join(tmpdir(), "ovstream-subagents-")),
      redisUrl: redis.url,
      rpcUrl: rpc.url,
      keyPrefix: prefix,
      shards: 1,
    });
    const rt = new PluginRuntime(cfg, new MemoryLogger(), { publisher: { initialBackoffMs: 20, maxBackoffMs: 200 } });
    runtimes.push(rt);
    return { rt, engine: createEngine(rt) };
  }

  it("a fork is recorded, assembles with its messages and `forked`, and is never imported", async () => {
    const { rt, engine } = engineFor("sa1");
    const seen = rpc.requests.length;
    const prepared = await engine.prepareSubagentSpawn!({
      parentSessionKey: PARENT_KEY,
      childSessionKey: CHILD_KEY,
      contextMode: "fork",
      parentSessionId: PARENT,
      childSessionId: CHILD,
      ttlMs: 60_000,
    });
    assert.ok(prepared && typeof prepared.rollback === "function");
    const [prepare] = rpc.requests.slice(seen);
    assert.equal(prepare!.path, "/v1/subagents/prepare");
    assert.deepEqual(prepare!.body, {
      parentSessionKey: PARENT_KEY,
      childSessionKey: CHILD_KEY,
      contextMode: "fork",
      parentSessionId: PARENT,
      childSessionId: CHILD,
    });

    await engine.assemble({ sessionId: CHILD, sessionKey: CHILD_KEY, messages: copy, prompt: "go" });
    const assemble = rpc.requests.at(-1)!;
    const body = assemble.body as Record<string, unknown>;
    assert.equal(body.forked, true);
    assert.deepEqual(body.messages, copy); // read by count against the parent's copy: sent, not counted
    assert.ok(!("recentTurns" in body) && !("messageCount" in body));

    const boot = await engine.bootstrap({ sessionId: CHILD, sessionKey: CHILD_KEY });
    assert.deepEqual(boot, { bootstrapped: false, reason: "a forked subagent: its transcript is its parent's" });
    await rt.publisher.drained();
    assert.deepEqual(await streamEvents(redis.url, streamKey("sa1", 0)), []); // no import of the copy
  });

  it("a rolled back spawn is forgotten here and at the service", async () => {
    const { engine } = engineFor("sa2");
    const prepared = await engine.prepareSubagentSpawn!({
      parentSessionKey: PARENT_KEY,
      childSessionKey: CHILD_KEY,
      contextMode: "fork",
      childSessionId: CHILD,
    });
    await prepared!.rollback();
    assert.equal(rpc.requests.at(-1)!.path, "/v1/subagents/rollback");
    assert.deepEqual(rpc.requests.at(-1)!.body, { childSessionKey: CHILD_KEY, childSessionId: CHILD });
    await engine.assemble({ sessionId: CHILD, sessionKey: CHILD_KEY, messages: copy, prompt: "go" });
    assert.ok(!("forked" in (rpc.requests.at(-1)!.body as Record<string, unknown>)));
  });

  it("an ended child's commit marker goes behind its turns, as the agent it ran as", async () => {
    const { rt, engine } = engineFor("sa3");
    await engine.prepareSubagentSpawn!({
      parentSessionKey: PARENT_KEY,
      childSessionKey: CHILD_KEY,
      contextMode: "isolated",
      childSessionId: CHILD,
    });
    await engine.afterTurn({
      sessionId: CHILD,
      sessionKey: CHILD_KEY,
      messages: copy,
      prePromptMessageCount: 0,
      runtimeContext: { agentId: "researcher" },
    });
    await engine.onSubagentEnded!({ childSessionKey: CHILD_KEY, reason: "completed" });
    await rt.publisher.drained();
    const events = await streamEvents(redis.url, streamKey("sa3", 0));
    assert.deepEqual(events.map((e) => [e.commit, e.agent_id, e.session_id]), [
      [null, "researcher", CHILD],
      ["session_end", "researcher", CHILD],
    ]);
    const ended = rpc.requests.at(-1)!;
    assert.equal(ended.path, "/v1/subagents/ended");
    assert.deepEqual(ended.body, { childSessionKey: CHILD_KEY, childSessionId: CHILD, reason: "completed" });
  });

  it("never fails the spawn when the service is away", async () => {
    const cfg = parseConfig({ stateDir: mkdtempSync(join(tmpdir(), "ovstream-subagents-")), rpcUrl: "http://127.0.0.1:9", rpcTimeoutMs: 200 });
    const log = new MemoryLogger();
    const rt = new PluginRuntime(cfg, log);
    runtimes.push(rt);
    const engine = createEngine(rt);
    const prepared = await engine.prepareSubagentSpawn!({ parentSessionKey: PARENT_KEY, childSessionKey: CHILD_KEY, contextMode: "fork" });
    assert.ok(prepared);
    await engine.onSubagentEnded!({ childSessionKey: CHILD_KEY, reason: "swept" });
    assert.ok(log.at("warn").some((m) => m.includes("not recorded")), log.lines.map((l) => l.message).join("\n"));
  });
});
