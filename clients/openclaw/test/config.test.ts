import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { ConfigError, configJsonSchema, DEFAULTS, parseConfig, parseConfigDetailed } from "../src/config.js";
import { TOOL_NAMES } from "../src/tools.js";
import { PACKAGE_ROOT, pythonHasModule, runPython } from "./helpers/proc.js";

describe("parseConfig", () => {
  it("gives the seed's and ovstream's defaults for an empty config", () => {
    const cfg = parseConfig(undefined);
    assert.equal(cfg.baseUrl, "http://127.0.0.1:1933");
    assert.equal(cfg.agent_prefix, "");
    assert.equal(cfg.autoCapture, true);
    assert.equal(cfg.autoRecall, true);
    assert.equal(cfg.commitTokenThreshold, 20000);
    assert.equal(cfg.commitKeepRecentCount, 10);
    assert.equal(cfg.recallLimit, 6);
    assert.equal(cfg.recallScoreThreshold, 0.15);
    assert.equal(cfg.recallMaxInjectedChars, 4000);
    assert.equal(cfg.recallPreferAbstract, false);
    assert.deepEqual(cfg.bypassSessionPatterns, []);
    assert.equal(cfg.redisUrl, "redis://127.0.0.1:6379/0");
    assert.equal(cfg.rpcUrl, "http://127.0.0.1:8787");
    assert.equal(cfg.shards, 4);
    assert.equal(cfg.keyPrefix, "ovstream");
    assert.equal(cfg.apiKey, undefined);
  });

  it("takes given values and comma-separated patterns", () => {
    const cfg = parseConfig({
      shards: 8,
      keyPrefix: "t1",
      autoCapture: false,
      bypassSessionPatterns: "agent:*:cron:**, x ",
      redisSentinels: "s1:26379, 10.0.0.2:26380",
    });
    assert.deepEqual(cfg.redisSentinels, ["s1:26379", "10.0.0.2:26380"]);
    assert.equal(cfg.shards, 8);
    assert.equal(cfg.keyPrefix, "t1");
    assert.equal(cfg.autoCapture, false);
    assert.deepEqual(cfg.bypassSessionPatterns, ["agent:*:cron:**", "x"]);
  });

  it("names the key of a bad value", () => {
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ shards: 0 }, /shards must be at least 1/],
      [{ shards: 2.5 }, /shards must be a whole number/],
      [{ keyPrefix: "a b" }, /keyPrefix must be/],
      [{ redisUrl: "http://x" }, /redisUrl must be a redis/],
      [{ rpcUrl: "ftp://x" }, /rpcUrl must be an http/],
      [{ autoCapture: "yes" }, /autoCapture must be true or false/],
      [{ bypassSessionPatterns: [1] }, /bypassSessionPatterns must be a list of strings/],
      [{ recallScoreThreshold: 2 }, /recallScoreThreshold must be at most 1/],
      [{ redisSentinels: ["s1"] }, /redisSentinels must be a list of host:port/],
      [{ redisSentinels: ["s1:1"], redisCluster: true }, /redisCluster or redisSentinels, not both/],
      [{ publishReplicas: -1 }, /publishReplicas must be at least 0/],
    ];
    for (const [raw, rx] of bad) {
      assert.throws(() => parseConfig(raw), (err: unknown) => err instanceof ConfigError && rx.test(err.message), JSON.stringify(raw));
    }
    assert.throws(() => parseConfig([]), ConfigError);
  });

  it("reports unknown keys and service-side keys that were changed", () => {
    const parsed = parseConfigDetailed({ nope: 1, recallLimit: 3, autoRecall: true, commitTokenThreshold: 20000 });
    assert.deepEqual(parsed.unknownKeys, ["nope"]);
    assert.deepEqual(parsed.serviceSideKeysSet, ["recallLimit"]);
  });

  it("reads ${ENV_VAR} references and never shows a secret in an error", () => {
    process.env.OVSTREAM_TEST_SECRET = "s3cret-value";
    assert.equal(parseConfig({ apiKey: "${OVSTREAM_TEST_SECRET}" }).apiKey, "s3cret-value");
    assert.equal(parseConfig({ rpcUrl: "http://${OVSTREAM_TEST_HOST_UNSET_X:-x}" }).rpcUrl, "http://${OVSTREAM_TEST_HOST_UNSET_X:-x}");
    assert.throws(
      () => parseConfig({ rpcToken: "${OVSTREAM_TEST_NOT_SET}" }),
      (err: unknown) => err instanceof ConfigError && /OVSTREAM_TEST_NOT_SET is not set/.test(err.message),
    );
    assert.throws(
      () => parseConfig({ redisUrl: "http://user:hunter2@x" }),
      (err: unknown) => err instanceof ConfigError && !err.message.includes("hunter2") && /redisUrl must be/.test(err.message),
    );
  });

  it("accepts a retired key (an old config still loads) and reports it", () => {
    const parsed = parseConfigDetailed({ streamMaxLen: 500, shards: 2 });
    assert.deepEqual(parsed.retiredKeys, ["streamMaxLen"]);
    assert.deepEqual(parsed.unknownKeys, []);
    assert.equal(parsed.config.shards, 2);
    assert.ok(!("streamMaxLen" in parsed.config));
  });

  it("does not let one parse change the defaults", () => {
    const cfg = parseConfig({});
    cfg.bypassSessionPatterns.push("x");
    assert.deepEqual(DEFAULTS.bypassSessionPatterns, []);
  });
});

describe("openclaw.plugin.json", () => {
  const manifest = JSON.parse(readFileSync(join(PACKAGE_ROOT, "openclaw.plugin.json"), "utf8")) as Record<string, unknown>;

  it("declares the config schema the code validates against", () => {
    assert.deepEqual(manifest.configSchema, configJsonSchema());
  });

  it("is a context-engine plugin with id ovstream and the eight tools", () => {
    assert.equal(manifest.id, "ovstream");
    assert.equal(manifest.kind, "context-engine");
    assert.deepEqual((manifest.contracts as { tools: string[] }).tools, [...TOOL_NAMES]);
  });

  it("package.json points OpenClaw at the compiled entry", () => {
    const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { openclaw: { extensions: string[] } };
    assert.deepEqual(pkg.openclaw.extensions, ["./dist/src/index.js"]);
  });
});

describe("defaults agree with the settings' defaults (core/config.py)", () => {
  const available = pythonHasModule("core.config");
  it("shared keys have the same default on both sides", { skip: available ? false : "core/config.py not available" }, () => {
    const code = `
import json, sys
from core.config import Settings
d = {name: f.default for name, f in Settings.model_fields.items()}
json.dump({
  "baseUrl": d["base_url"], "agent_prefix": d["agent_prefix"], "autoCapture": d["auto_capture"],
  "autoRecall": d["auto_recall"], "commitTokenThreshold": d["commit_token_threshold"],
  "commitKeepRecentCount": d["commit_keep_recent_count"], "recallLimit": d["recall_limit"],
  "recallScoreThreshold": d["recall_score_threshold"], "recallMaxInjectedChars": d["recall_max_injected_chars"],
  "recallPreferAbstract": d["recall_prefer_abstract"], "bypassSessionPatterns": list(d["bypass_session_patterns"]),
  "redisUrl": d["redis_url"], "shards": d["shards"], "keyPrefix": d["key_prefix"],
  "publishReplicas": d["publish_replicas"], "publishReplicasTimeoutMs": d["publish_replicas_timeout_ms"],
  "redisSentinels": list(d["redis_sentinels"]), "redisMasterName": d["redis_master_name"],
  "rpcUrl": "http://%s:%d" % (d["rpc_host"], d["rpc_port"]),
}, sys.stdout)
`;
    const py = runPython<Record<string, unknown>>(code, null);
    const ours: Record<string, unknown> = {};
    for (const k of Object.keys(py)) ours[k] = (DEFAULTS as unknown as Record<string, unknown>)[k];
    assert.deepEqual(ours, py);
  });
});
