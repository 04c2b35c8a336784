import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { parseConfig, type PluginConfig } from "../src/config.js";
import { createEngine, ENGINE_VERSION } from "../src/engine.js";
import { ovSessionId } from "../src/ids.js";
import { shardOf, streamKey } from "../src/keys.js";
import { PluginRuntime } from "../src/runtime.js";
import { estimateMessageTokens } from "../src/tokens.js";
import type { AgentMessage } from "../src/types.js";
import { FakeRpc, json, MemoryLogger } from "./helpers/fakes.js";
import { freePort, startRedis, streamEvents, waitFor, type RedisServer } from "./helpers/proc.js";

const SID = "0f8fad5b-d9cb-469f-a165-70867728950e";
const msgs: AgentMessage[] = [
  { role: "user", content: "What is the capital of France?" },
  { role: "assistant", content: [{ type: "text", text: "Paris." }], stopReason: "stop" },
  { role: "user", content: "And of Italy?" },
];

function runtime(overrides: Partial<PluginConfig>, log = new MemoryLogger()) {
  // Each runtime its own state dir: a spool or import marker left by another test (or
  // another run, in the user's ~/.openclaw) must not decide what this one publishes.
  const cfg = parseConfig({ stateDir: mkdtempSync(join(tmpdir(), "ovstream-engine-")), ...overrides });
  const rt = new PluginRuntime(cfg, log, { publisher: { initialBackoffMs: 20, maxBackoffMs: 200 } });
  return { rt, log, engine: createEngine(rt) };
}

describe("assemble", () => {
  const runtimes: PluginRuntime[] = [];
  const servers: FakeRpc[] = [];
  after(async () => {
    for (const rt of runtimes) await rt.close(50);
    for (const s of servers) await s.stop();
  });

  it("passes the messages through unchanged, with a local estimate, when the RPC times out", async () => {
    const hang = await new FakeRpc(() => {
      /* never answers */
    }).start();
    servers.push(hang);
    const { rt, engine, log } = runtime({ rpcUrl: hang.url, rpcTimeoutMs: 150 });
    runtimes.push(rt);
    const res = await engine.assemble({ sessionId: SID, messages: msgs, tokenBudget: 1000, prompt: "And of Italy?" });
    assert.equal(res.messages, msgs);
    assert.deepEqual(res.messages, msgs);
    assert.equal(res.estimatedTokens, estimateMessageTokens(msgs));
    assert.equal(res.systemPromptAddition, undefined);
    // the RPC was called: on a busy machine the client may give up before the server read the
    // request at all, so the connection is what shows it
    await waitFor("the RPC called", () => hang.connections >= 1 || undefined, 10_000);
    assert.ok(log.at("warn").some((m) => m.includes("assemble RPC failed") && m.includes("no answer within 150 ms")), log.at("warn").join("\n"));
  });

  it("passes through when the RPC is not listening, and when it answers an error or nonsense", async () => {
    const closed = await freePort();
    const errors = await new FakeRpc((req, res) =>
      req.path === "/v1/assemble" && (req.body as { sessionId: string }).sessionId === "err"
        ? json(res, 500, { error: { code: "internal", message: "boom" } })
        : json(res, 200, { hello: "world" }),
    ).start();
    servers.push(errors);
    for (const [url, sessionId] of [[`http://127.0.0.1:${closed}`, SID], [errors.url, "err"], [errors.url, "nonsense"]] as const) {
      const { rt, engine } = runtime({ rpcUrl: url });
      runtimes.push(rt);
      const res = await engine.assemble({ sessionId, messages: msgs, availableTools: new Set(["read"]) });
      assert.equal(res.messages, msgs, `${url} ${sessionId}`);
      assert.equal(res.estimatedTokens, estimateMessageTokens(msgs));
    }
  });

  it("warns once per outage of the RPC and says when it answers again", async () => {
    let up = false;
    const rpc = await new FakeRpc((_req, res) =>
      up ? json(res, 200, { messages: msgs, estimatedTokens: 1 }) : json(res, 503, { error: { code: "down", message: "down" } }),
    ).start();
    servers.push(rpc);
    const { rt, engine, log } = runtime({ rpcUrl: rpc.url });
    runtimes.push(rt);
    await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" });
    await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" });
    up = true;
    await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" });
    assert.equal(log.at("warn").filter((m) => m.includes("assemble RPC failed")).length, 1);
    assert.equal(log.at("info").filter((m) => m.includes("assemble RPC answers again")).length, 1);
  });

  it("returns the RPC's answer and forwards what marks the main call", async () => {
    const assembled = [{ role: "user", content: "[Session History Summary]\n..." }, ...msgs];
    const rpc = await new FakeRpc((_req, res) =>
      json(res, 200, { messages: assembled, estimatedTokens: 42, systemPromptAddition: "guide" }),
    ).start();
    servers.push(rpc);
    process.env.OVSTREAM_TEST_RPC_TOKEN = "token-from-the-environment";
    const { rt, engine } = runtime({ rpcUrl: rpc.url, apiKey: "user-key", rpcToken: "${OVSTREAM_TEST_RPC_TOKEN}" });
    runtimes.push(rt);
    const res = await engine.assemble({
      sessionId: SID,
      sessionKey: "agent:main:telegram:7",
      messages: msgs,
      tokenBudget: 64000,
      availableTools: new Set(["memory_recall", "read"]),
      citationsMode: undefined,
      prompt: undefined,
      model: "m1",
      runtimeContext: { agentId: "main", llm: { complete: () => null }, rewriteTranscriptEntries: () => null, nested: { a: 1 } },
    });
    assert.deepEqual(res, { messages: assembled, estimatedTokens: 42, systemPromptAddition: "guide" });
    const req = rpc.requests[0]!;
    assert.equal(req.path, "/v1/assemble");
    assert.equal(req.headers["x-openviking-api-key"], "user-key");
    assert.equal(req.headers.authorization, "Bearer token-from-the-environment");
    assert.equal(req.headers["x-ovstream-plugin"], ENGINE_VERSION); // the service sees which plugin talks
    assert.deepEqual(req.body, {
      sessionId: SID,
      sessionKey: "agent:main:telegram:7",
      messageCount: msgs.length,
      tokenBudget: 64000,
      runtimeContext: { agentId: "main" },
      model: "m1",
      prompt: null,
      availableTools: ["memory_recall", "read"],
      citationsMode: null,
      heldTurns: [],
      recentTurns: [],
    });
  });

  it("sends the transform-context call without the main-call keys", async () => {
    const rpc = await new FakeRpc((_req, res) => json(res, 200, { messages: msgs, estimatedTokens: 7 })).start();
    servers.push(rpc);
    const { rt, engine } = runtime({ rpcUrl: rpc.url });
    runtimes.push(rt);
    await engine.assemble({ sessionId: SID, messages: msgs, tokenBudget: 64000 });
    const body = rpc.requests[0]!.body as Record<string, unknown>;
    for (const k of ["prompt", "availableTools", "citationsMode", "messageCount"]) assert.ok(!(k in body), k);
    assert.deepEqual(body.messages, msgs); // its recall query comes from them
  });

  it("sends the transcript itself on the main call when it sends no turns (autoCapture off)", async () => {
    const rpc = await new FakeRpc((_req, res) => json(res, 200, { messages: msgs, estimatedTokens: 7 })).start();
    servers.push(rpc);
    const { rt, engine } = runtime({ rpcUrl: rpc.url, autoCapture: false });
    runtimes.push(rt);
    await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" });
    const body = rpc.requests[0]!.body as Record<string, unknown>;
    assert.deepEqual(body.messages, msgs);
    assert.ok(!("messageCount" in body) && !("recentTurns" in body));
  });

  it("passes the host's own messages through when the service has none for a counted transcript", async () => {
    const addition = "<relevant-memories>tea</relevant-memories>";
    let answer: Record<string, unknown> = { messages: [], estimatedTokens: 1 };
    const rpc = await new FakeRpc((_req, res) => json(res, 200, answer)).start();
    servers.push(rpc);
    const { rt, engine } = runtime({ rpcUrl: rpc.url });
    runtimes.push(rt);
    const own = estimateMessageTokens(msgs);
    assert.deepEqual(await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" }), {
      messages: msgs,
      estimatedTokens: own,
    });
    answer = { messages: [], estimatedTokens: 9, systemPromptAddition: addition };
    const res = await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" });
    assert.equal(res.messages, msgs);
    assert.equal(res.systemPromptAddition, addition);
    assert.ok(res.estimatedTokens > own, "the recall block counts too");
  });

  it("skips the RPC for bypassed sessions and, with autoRecall off, for the transform-context call", async () => {
    const rpc = await new FakeRpc((_req, res) => json(res, 200, { messages: [], estimatedTokens: 0 })).start();
    servers.push(rpc);
    const { rt, engine } = runtime({ rpcUrl: rpc.url, autoRecall: false, bypassSessionPatterns: ["agent:*:cron:**"] });
    runtimes.push(rt);
    const a = await engine.assemble({ sessionId: SID, sessionKey: "agent:main:cron:nightly", messages: msgs, prompt: "x" });
    assert.equal(a.messages, msgs);
    const b = await engine.assemble({ sessionId: SID, messages: msgs });
    assert.equal(b.messages, msgs);
    assert.equal(rpc.requests.length, 0);
    // The main call still goes to the RPC with autoRecall off.
    await engine.assemble({ sessionId: SID, messages: msgs, prompt: "x" });
    assert.equal(rpc.requests.length, 1);
  });
});

describe("compact", () => {
  const runtimes: PluginRuntime[] = [];
  const servers: FakeRpc[] = [];
  after(async () => {
    for (const rt of runtimes) await rt.close(50);
    for (const s of servers) await s.stop();
  });

  it("reports ok:false when the RPC fails or times out", async () => {
    const hang = await new FakeRpc(() => {}).start();
    const fail = await new FakeRpc((_req, res) => json(res, 503, { error: { code: "ov_down", message: "OV down" } })).start();
    servers.push(hang, fail);
    const t = runtime({ rpcUrl: hang.url, compactTimeoutMs: 100 });
    const f = runtime({ rpcUrl: fail.url });
    runtimes.push(t.rt, f.rt);
    assert.deepEqual(await t.engine.compact({ sessionId: SID, force: true }), { ok: false, compacted: false, reason: "rpc_timeout" });
    assert.deepEqual(await f.engine.compact({ sessionId: SID }), { ok: false, compacted: false, reason: "rpc_error" });
    assert.ok(f.log.at("warn").some((m) => m.includes("HTTP 503") && m.includes("OV down")));
  });

  it("returns the RPC's result and forwards the request", async () => {
    const result = { ok: true, compacted: true, reason: "commit_completed", result: { summary: "s", firstKeptEntryId: "archive_001", tokensBefore: 900, tokensAfter: 100 } };
    const rpc = await new FakeRpc((_req, res) => json(res, 200, result)).start();
    servers.push(rpc);
    const { rt, engine } = runtime({ rpcUrl: rpc.url });
    runtimes.push(rt);
    assert.deepEqual(await engine.compact({ sessionId: SID, sessionKey: "k", tokenBudget: 1000, currentTokenCount: 900, force: true, sessionFile: "/tmp/x" }), result);
    assert.deepEqual(rpc.requests[0]!.body, { sessionId: SID, sessionKey: "k", tokenBudget: 1000, currentTokenCount: 900, force: true });
  });

  it("answers a bypassed session locally and rejects when the host aborts", async () => {
    const hang = await new FakeRpc(() => {}).start();
    servers.push(hang);
    const { rt, engine } = runtime({ rpcUrl: hang.url, bypassSessionPatterns: ["skip-*"] });
    runtimes.push(rt);
    assert.deepEqual(await engine.compact({ sessionId: "skip-me" }), { ok: true, compacted: false, reason: "session_bypassed" });
    const ctrl = new AbortController();
    const pending = engine.compact({ sessionId: SID, abortSignal: ctrl.signal });
    await waitFor("the compact request", () => hang.requests.length === 1);
    ctrl.abort();
    await assert.rejects(pending, /aborted/);
  });
});

describe("afterTurn and commitTurn", () => {
  let redis: RedisServer;
  const runtimes: PluginRuntime[] = [];
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const rt of runtimes) await rt.close(100);
    await redis.stop();
  });

  it("returns at once with Redis unreachable; the turn waits in the buffer", async () => {
    const port = await freePort();
    const { rt, engine } = runtime({ redisUrl: `redis://127.0.0.1:${port}/0` });
    runtimes.push(rt);
    await engine.afterTurn({ sessionId: SID, messages: msgs, prePromptMessageCount: 2 });
    assert.equal(rt.publisher.getStats().pending, 1);
    assert.equal(rt.publisher.getStats().delivered, 0);
  });

  it("a quota's 429 passes assemble through, compact says why, and the turn is still published", async () => {
    const refuse = await new FakeRpc((_req, res) => {
      res.setHeader("Retry-After", "1");
      json(res, 429, { error: { code: "quota_exceeded", message: "tenant acme is over its quota of 2 assembles a second" } });
    }).start();
    try {
      const { rt, engine, log } = runtime({ redisUrl: redis.url, rpcUrl: refuse.url, keyPrefix: "q429" });
      runtimes.push(rt);
      const res = await engine.assemble({ sessionId: SID, messages: msgs, prompt: "p" });
      assert.equal(res.messages, msgs);
      assert.ok(log.at("warn").some((m) => m.includes("HTTP 429") && m.includes("over its quota")));
      assert.deepEqual(await engine.compact({ sessionId: SID }), { ok: false, compacted: false, reason: "quota_exceeded" });
      await engine.afterTurn({ sessionId: SID, messages: msgs, prePromptMessageCount: 0 });
      await waitFor("the turn delivered", () => rt.publisher.getStats().delivered === 1);
    } finally {
      await refuse.stop();
    }
  });

  it("publishes the TurnEvent on the session's shard of the configured prefix", async () => {
    const { rt, engine } = runtime({ redisUrl: redis.url, keyPrefix: "at1", shards: 8 });
    runtimes.push(rt);
    const key = "agent:main:telegram:99";
    await engine.afterTurn({
      sessionId: "not-a-uuid",
      sessionKey: key,
      messages: msgs,
      prePromptMessageCount: 2,
      tokenBudget: 128000,
      runtimeContext: { agentId: "main" },
    });
    await rt.publisher.drained();
    const stream = streamKey("at1", shardOf(ovSessionId("not-a-uuid", key), 8));
    const events = await streamEvents(redis.url, stream);
    assert.equal(events.length, 1);
    const ev = events[0]!;
    assert.equal(ev.session_id, "not-a-uuid");
    assert.equal(ev.session_key, key);
    assert.equal(ev.agent_id, "main");
    assert.deepEqual(ev.messages, msgs);
    assert.equal(ev.pre_prompt_message_count, 2);
    assert.equal(ev.token_budget, 128000);
    assert.equal(ev.advancement_key, null);
    assert.equal(ev.is_heartbeat, false);
  });

  it("publishes nothing with autoCapture off or for a bypassed session", async () => {
    const off = runtime({ redisUrl: redis.url, autoCapture: false });
    const byp = runtime({ redisUrl: redis.url, bypassSessionPatterns: ["agent:*:cron:**"] });
    runtimes.push(off.rt, byp.rt);
    await off.engine.afterTurn({ sessionId: SID, messages: msgs, prePromptMessageCount: 0 });
    await byp.engine.afterTurn({ sessionId: SID, sessionKey: "agent:x:cron:1", messages: msgs, prePromptMessageCount: 0 });
    assert.deepEqual(await off.engine.commitTurn({ sessionId: SID, advancementKey: "k", messages: msgs }), { status: "committed" });
    assert.equal(off.rt.publisher.getStats().pending + off.rt.publisher.getStats().delivered, 0);
    assert.equal(byp.rt.publisher.getStats().pending + byp.rt.publisher.getStats().delivered, 0);
  });

  it("publishes no commit marker when a bypassed session ends; one when another ends", async () => {
    const { rt } = runtime({ redisUrl: redis.url, bypassSessionPatterns: ["agent:*:cron:**"] });
    runtimes.push(rt);
    assert.equal(rt.endSession({ sessionId: SID, sessionKey: "agent:main:cron:nightly:run:1" }, "reset"), false);
    assert.equal(rt.publisher.getStats().pending + rt.publisher.getStats().delivered, 0);
    assert.equal(rt.endSession({ sessionId: SID, sessionKey: "agent:main:telegram:1" }, "reset"), true);
    await rt.publisher.drained();
    assert.equal(rt.publisher.getStats().delivered, 1);
  });

  it("bootstraps no import of a session it published a turn of (the host's second-turn bootstrap)", async () => {
    const { rt, engine, log } = runtime({ redisUrl: redis.url, keyPrefix: "bs1", shards: 1 });
    runtimes.push(rt);
    const sessionId = `${SID.slice(0, -4)}b001`;
    assert.deepEqual(await engine.commitTurn({ sessionId, advancementKey: "b1", messages: msgs.slice(0, 2) }), { status: "committed" });
    const result = await engine.bootstrap({ sessionId });
    // decided before any transcript is read (outside the host none could be)
    assert.deepEqual(result, { bootstrapped: false, reason: "turns captured since the session began" });
    await rt.publisher.drained();
    const events = await streamEvents(redis.url, streamKey("bs1", 0));
    assert.deepEqual(events.map((e) => e.import_transcript), [false]);
    assert.ok(!log.at("info").some((m) => m.includes("importing")), log.at("info").join("\n"));
  });

  it("commitTurn publishes the turn with its advancementKey once, then says duplicate", async () => {
    const { rt, engine } = runtime({ redisUrl: redis.url, keyPrefix: "ct1", shards: 1 });
    runtimes.push(rt);
    const turn = msgs.slice(2);
    const params = { sessionId: SID, advancementKey: "turn-1", messages: turn, admission: { agentId: "helper", sessionId: SID } };
    assert.deepEqual(await engine.commitTurn(params), { status: "committed" });
    assert.deepEqual(await engine.commitTurn(params), { status: "duplicate" });
    await rt.publisher.drained();
    const events = await streamEvents(redis.url, streamKey("ct1", 0));
    assert.equal(events.length, 1);
    assert.equal(events[0]!.advancement_key, "turn-1");
    assert.equal(events[0]!.agent_id, "helper");
    assert.equal(events[0]!.pre_prompt_message_count, 0);
    assert.deepEqual(events[0]!.messages, turn);
    // A durable-turn host: afterTurn no longer publishes (it would double every turn).
    await engine.afterTurn({ sessionId: SID, messages: msgs, prePromptMessageCount: 2 });
    await rt.publisher.drained();
    assert.equal((await streamEvents(redis.url, streamKey("ct1", 0))).length, 1);
  });

  it("commitTurn of a turn afterTurn already published is not published again", async () => {
    const { rt, engine } = runtime({ redisUrl: redis.url, keyPrefix: "ct2", shards: 1 });
    runtimes.push(rt);
    await engine.afterTurn({ sessionId: SID, messages: msgs, prePromptMessageCount: 2 });
    assert.deepEqual(await engine.commitTurn({ sessionId: SID, advancementKey: "t", messages: msgs.slice(2) }), { status: "committed" });
    // A different turn is.
    await engine.commitTurn({ sessionId: SID, advancementKey: "t2", messages: [{ role: "user", content: "next" }] });
    await rt.publisher.drained();
    const events = await streamEvents(redis.url, streamKey("ct2", 0));
    assert.deepEqual(events.map((e) => e.advancement_key), [null, "t2"]);
  });

  it("never throws from afterTurn, even without a usable session id", async () => {
    const { rt, engine, log } = runtime({ redisUrl: redis.url });
    runtimes.push(rt);
    await engine.afterTurn({ sessionId: "", messages: msgs, prePromptMessageCount: 0 });
    assert.equal(rt.publisher.getStats().pending, 0);
    assert.ok(log.at("warn").some((m) => m.includes("turn not published")));
  });

  it("declares what newer OpenClaw hosts require of a durable-turn engine", () => {
    const { engine, rt } = runtime({});
    runtimes.push(rt);
    assert.equal(engine.info.id, "ovstream");
    assert.equal(engine.info.ownsCompaction, true);
    assert.deepEqual(engine.info.transcriptSemantics, {
      currentTurnFence: "before-current-turn-entry-v1",
      turnAdvancementIdempotency: "atomic-idempotent-v1",
    });
    assert.equal(typeof engine.commitTurn, "function");
  });
});

