import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { buildTurnEvent, decodeTurnEvent, encodeTurnEvent, EventEncodeError, type TurnEvent } from "../src/events.js";
import { pythonHasModule, runPython } from "./helpers/proc.js";

const FIELDS = [
  "v",
  "event_id",
  "session_id",
  "session_key",
  "agent_id",
  "messages",
  "pre_prompt_message_count",
  "is_heartbeat",
  "token_budget",
  "published_at",
  "advancement_key",
  "user",
  "commit",
  "import_transcript",
  "import_run",
  "release",
].sort();

const user = (text: string) => ({ role: "user", content: text, timestamp: 1_760_000_000_000 });
const assistant = (text: string) => ({
  role: "assistant",
  content: [{ type: "text", text }],
  stopReason: "stop",
  timestamp: 1_760_000_000_500,
});

function sampleEvents(): TurnEvent[] {
  const now = () => 1_760_000_000_123;
  return [
    buildTurnEvent({
      sessionId: "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
      sessionKey: "agent:main:telegram:1",
      agentId: "main",
      messages: [user("hi"), assistant("hello")],
      prePromptMessageCount: 0,
      tokenBudget: 128000,
      now,
      eventId: "e1",
    }),
    buildTurnEvent({
      sessionId: "plain",
      messages: [
        user("第一个问题"),
        assistant("回答 😀"),
        { role: "toolResult", toolCallId: "c1", toolName: "ls", content: [{ type: "text", text: "a\nb" }], isError: false },
      ],
      prePromptMessageCount: 1,
      isHeartbeat: true,
      tokenBudget: 99999.7,
      now: () => 1_760_000_001_000,
      eventId: "e2",
    }),
    buildTurnEvent({
      sessionId: "x:y",
      messages: [user("lone \ud800 surrogate and escaped \\ud800 text"), { role: "assistant", content: [], extra: { nan: Number.NaN } }],
      prePromptMessageCount: -3,
      tokenBudget: Number.POSITIVE_INFINITY,
      advancementKey: "turn-42",
      user: "alice",
      now,
      eventId: "e3",
    }),
  ];
}

describe("buildTurnEvent", () => {
  it("carries exactly TurnEvent's fields with the types msgspec expects", () => {
    const ev = buildTurnEvent({ sessionId: "s", messages: [user("a")], now: () => 1500 });
    assert.deepEqual(Object.keys(ev).sort(), FIELDS);
    assert.equal(ev.v, 1);
    assert.equal(ev.session_key, null);
    assert.equal(ev.agent_id, null);
    assert.equal(ev.token_budget, null);
    assert.equal(ev.advancement_key, null);
    assert.equal(ev.user, null);
    assert.equal(ev.is_heartbeat, false);
    assert.equal(ev.published_at, 1.5);
    assert.match(ev.event_id, /^[0-9a-f-]{36}$/);
  });

  it("keeps only object messages and re-counts the pre-prompt boundary over them", () => {
    const ev = buildTurnEvent({
      sessionId: "s",
      messages: [user("a"), null, "junk", user("b"), [1], assistant("c"), user("d")],
      prePromptMessageCount: 5,
    });
    assert.equal(ev.messages.length, 4);
    assert.equal(ev.pre_prompt_message_count, 2); // a and b were before index 5
  });

  it("floors token budgets and drops non-positive or non-finite ones", () => {
    assert.equal(buildTurnEvent({ sessionId: "s", messages: [], tokenBudget: 1000.9 }).token_budget, 1000);
    assert.equal(buildTurnEvent({ sessionId: "s", messages: [], tokenBudget: 0 }).token_budget, null);
    assert.equal(buildTurnEvent({ sessionId: "s", messages: [], tokenBudget: "5" }).token_budget, null);
    assert.equal(buildTurnEvent({ sessionId: "s", messages: [], prePromptMessageCount: 2.7 }).pre_prompt_message_count, 0);
  });

  it("uses a fresh event id each time", () => {
    const a = buildTurnEvent({ sessionId: "s", messages: [] });
    const b = buildTurnEvent({ sessionId: "s", messages: [] });
    assert.notEqual(a.event_id, b.event_id);
  });
});

describe("encodeTurnEvent", () => {
  it("round-trips through JSON", () => {
    for (const ev of sampleEvents()) {
      const back = decodeTurnEvent(encodeTurnEvent(ev));
      assert.equal(back.event_id, ev.event_id);
      assert.equal(back.messages.length, ev.messages.length);
    }
  });

  it("replaces lone surrogates but leaves escaped backslash text alone", () => {
    const json = encodeTurnEvent(sampleEvents()[2]!);
    assert.ok(!/\\ud800/.test(json.replace(/\\\\ud800/g, "")), json);
    const back = decodeTurnEvent(json);
    assert.equal((back.messages[0] as { content: string }).content, "lone \ufffd surrogate and escaped \\ud800 text");
  });

  it("keeps paired surrogates (emoji) as they are", () => {
    const json = encodeTurnEvent(sampleEvents()[1]!);
    assert.ok(json.includes("😀"));
  });

  it("fails with EventEncodeError on values JSON cannot hold", () => {
    const ev = buildTurnEvent({ sessionId: "s", messages: [{ role: "user", content: "x", big: 1n }] });
    assert.throws(() => encodeTurnEvent(ev), EventEncodeError);
  });
});

describe("cross-check with core/events.py", () => {
  const available = pythonHasModule("core.events");
  it("every encoded event decodes as core.events.TurnEvent to the same values", { skip: available ? false : "core/events.py not available" }, () => {
    const encoded = sampleEvents().map(encodeTurnEvent);
    const code = `
import json, sys, msgspec
from core.events import TurnEvent, decode, STREAM_FIELD
out = []
for text in json.load(sys.stdin):
    ev = decode(text.encode("utf-8"), TurnEvent)
    out.append(msgspec.to_builtins(ev))
fields = sorted(f.name for f in msgspec.structs.fields(TurnEvent))
json.dump({"events": out, "fields": fields, "stream_field": STREAM_FIELD}, sys.stdout)
`;
    const py = runPython<{ events: Record<string, unknown>[]; fields: string[]; stream_field: string }>(code, encoded);
    assert.deepEqual(py.fields, FIELDS);
    assert.equal(py.stream_field, "e");
    assert.equal(py.events.length, encoded.length);
    for (const [i, text] of encoded.entries()) {
      assert.deepEqual(py.events[i], JSON.parse(text), `event ${i}`);
    }
  });

  it("core.events rejects what the plugin must never send (so the check above can fail)", { skip: available ? false : "core/events.py not available" }, () => {
    const good = JSON.parse(encodeTurnEvent(sampleEvents()[0]!)) as Record<string, unknown>;
    const bad = [
      JSON.stringify({ ...good, v: 2 }),
      JSON.stringify({ ...good, token_budget: 1.5 }),
      JSON.stringify({ ...good, messages: ["not an object"] }),
      JSON.stringify({ ...good, messages: [{ t: "\ud800" }] }),
    ];
    const code = `
import json, sys
from core.events import TurnEvent, decode, EventDecodeError
res = []
for text in json.load(sys.stdin):
    try:
        decode(text.encode("utf-8", "surrogatepass"), TurnEvent)
        res.append("ok")
    except EventDecodeError:
        res.append("rejected")
json.dump(res, sys.stdout)
`;
    assert.deepEqual(runPython<string[]>(code, bad), ["rejected", "rejected", "rejected", "rejected"]);
  });
});
