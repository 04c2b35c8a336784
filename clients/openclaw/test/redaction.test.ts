import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { parseConfig, ConfigError } from "../src/config.js";
import { bundledRules, compileRule, iban, luhn, Placeholders, policyOf, redactMessages, redactText, TurnRedactor } from "../src/redaction.js";
import { ovSessionId } from "../src/ids.js";
import { shardOf, streamKey } from "../src/keys.js";
import { PluginRuntime } from "../src/runtime.js";
import { MemoryLogger } from "./helpers/fakes.js";
import { freePort, PACKAGE_ROOT, startRedis, streamEvents, type RedisServer } from "./helpers/proc.js";

interface Case {
  text: string;
  personal?: string[];
  expect: string;
}

const REPO = join(PACKAGE_ROOT, "..", "..");
const CASES = (JSON.parse(readFileSync(join(REPO, "tests", "redaction", "cases.json"), "utf8")) as { cases: Case[] }).cases;
const AWS = "AKIA" + "IOSFODNN7EXAMPLE";

describe("redaction: the table the service's core/redaction is tested against", () => {
  it("runs on the rule file the service reads (the build's copy is the same file)", () => {
    const canonical = readFileSync(join(REPO, "core", "redaction", "rules.json"), "utf8");
    const copy = readFileSync(join(PACKAGE_ROOT, "dist", "src", "redaction-rules.json"), "utf8");
    assert.equal(copy, canonical);
  });

  for (const c of CASES) {
    it(`${c.personal ? `[${c.personal.join(",")}] ` : ""}${c.text.slice(0, 50)}`, () => {
      const policy = policyOf("mask", c.personal ?? [], []);
      assert.equal(redactText(c.text, policy.rules, new Placeholders())[0], c.expect);
    });
  }

  it("masks every secret kind in some case", () => {
    const masked = new Set<string>();
    for (const c of CASES) for (const kind of redactText(c.text, policyOf("mask", [], []).rules, new Placeholders())[1].keys()) masked.add(kind);
    const kinds = bundledRules().filter((r) => r.ruleClass === "secret").map((r) => r.kind);
    assert.deepEqual(kinds.filter((k) => !masked.has(k)), []);
  });
});

describe("redaction of a turn", () => {
  const messages = [
    { role: "user", content: `my key ${AWS}` },
    { role: "assistant", content: [{ type: "toolCall", id: "c1", name: "sh", arguments: { cmd: `export K=${AWS}` } }] },
    { role: "toolResult", toolCallId: "c1", content: [{ type: "text", text: "DB_PASSWORD=hunter22" }] },
    { role: "user", content: "nothing here" },
  ];

  it("reaches every text: user and assistant text, tool call arguments, tool results", () => {
    const [masked, kinds] = redactMessages(messages, policyOf("mask", [], []), new Placeholders());
    assert.deepEqual(Object.fromEntries(kinds), { aws_access_key: 2, password: 1 });
    const json = JSON.stringify(masked);
    assert.ok(!json.includes(AWS) && !json.includes("hunter22"), json);
    assert.equal(masked[3], messages[3]); // untouched: the same object
  });

  it("drop withholds the message, keeping what pairs a tool call with its result", () => {
    const [dropped] = redactMessages(messages, policyOf("drop", [], []), new Placeholders());
    assert.deepEqual(dropped[2], { role: "toolResult", toolCallId: "c1", content: [{ type: "text", text: "[message withheld: it held password]" }] });
  });

  it("keeps a value's number across the turns of a session, per agent's policy", () => {
    const redactor = new TurnRedactor({ redaction: "mask", redactionAgents: { coder: "off" }, redactionPersonal: [], redactionCustomPatterns: [] });
    const first = redactor.redact("s1", "main", [{ role: "user", content: `a AKIA${"ABCDEFGHIJKLMNOP"} b ${AWS}` }])[0];
    const later = redactor.redact("s1", "main", [{ role: "user", content: `again ${AWS}` }])[0];
    assert.deepEqual(first, [{ role: "user", content: "a <redacted:aws_access_key#1> b <redacted:aws_access_key#2>" }]);
    assert.deepEqual(later, [{ role: "user", content: "again <redacted:aws_access_key#2>" }]);
    assert.deepEqual(redactor.redact("s2", "coder", [{ role: "user", content: AWS }])[0], [{ role: "user", content: AWS }]);
  });

  it("redacts a message object once: the next turn's transcript costs only what is new", () => {
    const redactor = new TurnRedactor({ redaction: "mask", redactionAgents: {}, redactionPersonal: [], redactionCustomPatterns: [] });
    const old = { role: "user", content: `key ${AWS}` };
    const [first, kinds] = redactor.redact("s3", "main", [old]);
    const added = { role: "assistant", content: [{ type: "text", text: `saved ${AWS}` }] };
    const [second, again] = redactor.redact("s3", "main", [old, added]);
    assert.deepEqual(Object.fromEntries(kinds), { aws_access_key: 1 });
    assert.deepEqual(Object.fromEntries(again), { aws_access_key: 1 }); // the new message only
    assert.equal(second[0], first[0]); // the first message's redaction, remembered
    assert.deepEqual(second[1], { role: "assistant", content: [{ type: "text", text: "saved <redacted:aws_access_key#1>" }] });
  });

  it("checks the validators as the service does", () => {
    assert.equal(luhn("4111 1111 1111 1111"), true);
    assert.equal(luhn("4111 1111 1111 1112"), false);
    assert.equal(iban("GB82WEST12345698765432"), true);
    assert.equal(iban("DE89 3704 0044 0532 0130 01"), false);
    assert.throws(() => compileRule({ kind: "Bad Kind", pattern: "x" }), /kind/);
  });
});

describe("redaction config", () => {
  it("defaults to masking secrets, no personal kinds, no custom patterns", () => {
    const cfg = parseConfig({});
    assert.equal(cfg.redaction, "mask");
    assert.deepEqual([cfg.redactionAgents, cfg.redactionPersonal, cfg.redactionCustomPatterns], [{}, [], []]);
  });

  it("refuses what would mask nothing or never compile, naming the key", () => {
    assert.throws(() => parseConfig({ redaction: "hide" }), (e: Error) => e instanceof ConfigError && /redaction must be mask, drop or off/.test(e.message));
    assert.throws(() => parseConfig({ redactionPersonal: ["emails"] }), /redactionPersonal must be a list of/);
    assert.throws(() => parseConfig({ redactionAgents: { coder: "never" } }), /redactionAgents/);
    assert.throws(() => parseConfig({ redactionCustomPatterns: [{ kind: "x", pattern: "(" }] }), /redactionCustomPatterns must be a list of valid patterns/);
    const cfg = parseConfig({ redactionPersonal: "email, iban", redactionCustomPatterns: [{ kind: "ticket", pattern: "TCK-[0-9]{6}" }] });
    assert.deepEqual(cfg.redactionPersonal, ["email", "iban"]);
  });
});

describe("redaction before a turn leaves the gateway", () => {
  let redis: RedisServer;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  it("publishes no secret to Redis, and spools none to disk while Redis is away", async () => {
    const said = [
      { role: "user", content: `deploy with ${AWS} and DB_PASSWORD=hunter22` },
      { role: "assistant", content: [{ type: "toolCall", id: "c1", name: "sh", arguments: { cmd: `aws --key ${AWS}` } }] },
    ];
    const live = new PluginRuntime(parseConfig({ redisUrl: redis.url, stateDir: mkdtempSync(join(tmpdir(), "ovstream-red-")), keyPrefix: "red" }), new MemoryLogger());
    assert.ok(live.publishTurn({ sessionId: "s-live", messages: said, prePromptMessageCount: 0 }));
    await live.close(2000);
    const ovSid = ovSessionId("s-live", undefined);
    const events = await streamEvents(redis.url, streamKey("red", shardOf(ovSid, live.config.shards)));
    const json = JSON.stringify(events);
    assert.equal(events.length, 1);
    assert.ok(!json.includes(AWS) && !json.includes("hunter22"), json);
    assert.ok(json.includes("<redacted:aws_access_key#1>") && json.includes("<redacted:password#1>"), json);

    const stateDir = mkdtempSync(join(tmpdir(), "ovstream-red-away-"));
    const away = new PluginRuntime(parseConfig({ redisUrl: `redis://127.0.0.1:${await freePort()}/0`, stateDir, keyPrefix: "red" }), new MemoryLogger(), {
      publisher: { initialBackoffMs: 20, maxBackoffMs: 200 },
    });
    assert.ok(away.publishTurn({ sessionId: "s-away", messages: said, prePromptMessageCount: 0 }));
    const spool = join(stateDir, "spool");
    const files = readdirSync(spool);
    assert.equal(files.length, 1);
    const kept = readFileSync(join(spool, files[0]!), "utf8");
    assert.ok(!kept.includes(AWS) && !kept.includes("hunter22") && kept.includes("<redacted:aws_access_key#1>"), kept);
    await away.close(50);
  });
});
