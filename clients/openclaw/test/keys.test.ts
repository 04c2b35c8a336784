import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  deploymentKey,
  LAST_TURN_TTL_S,
  lastTurnKey,
  mappedStreamKey,
  PUBLISH_TURN_SCRIPT,
  shardOf,
  streamKey,
  tagGenerationKey,
} from "../src/keys.js";
import { pythonHasModule, runPython } from "./helpers/proc.js";

// Pinned from workers.store.keys.shard_of so a change on either side shows here.
const PINNED: Array<[string, number, number]> = [
  ["a1b2c3d4-e5f6-7890-abcd-ef1234567890", 4, 1],
  ["plain-session", 4, 2],
  ["plain-session", 7, 5],
  ["x", 1, 0],
  ["062d87cd30e068a70b1231273256767191ff73b54e35e3cda3ab11d4866d4467", 16, 10],
  ["日本語", 4, 1],
  ["", 3, 2],
];

describe("shardOf", () => {
  for (const [id, shards, shard] of PINNED) {
    it(`${JSON.stringify(id)} mod ${shards} -> ${shard}`, () => {
      assert.equal(shardOf(id, shards), shard);
    });
  }

  it("stays in range and spreads over the shards", () => {
    const counts = new Array<number>(4).fill(0);
    for (let i = 0; i < 400; i++) {
      const s = shardOf(`session-${i}`, 4);
      assert.ok(s >= 0 && s < 4);
      counts[s] = (counts[s] ?? 0) + 1;
    }
    for (const c of counts) assert.ok(c > 50, `uneven spread: ${counts.join(",")}`);
  });

  it("rejects a shard count that is not a positive integer", () => {
    assert.throws(() => shardOf("x", 0), RangeError);
    assert.throws(() => shardOf("x", 1.5), RangeError);
  });
});

describe("streamKey", () => {
  it("is <prefix>:{s<shard>}:turns", () => {
    assert.equal(streamKey("ovstream", 3), "ovstream:{s3}:turns");
    assert.equal(streamKey("t.x-1", 0), "t.x-1:{s0}:turns");
  });
});

describe("cross-check with workers/store/keys.py", () => {
  const available = pythonHasModule("workers.store.keys");
  it("shard_of and Keys.stream agree for many ids and shard counts", { skip: available ? false : "workers/store/keys.py not available" }, () => {
    const cases: Array<[string, number]> = [];
    for (let i = 0; i < 300; i++) {
      cases.push([`sess-${i}-${"é".repeat(i % 3)}${i % 5 === 0 ? "😀" : ""}`, 1 + (i % 17)]);
    }
    const code = `
import json, sys
from core.defaults import LAST_TURN_TTL_S
from workers.store.keys import Keys, shard_of
cases = json.load(sys.stdin)
json.dump({"shards": [shard_of(s, n) for s, n in cases],
           "keys": [Keys("pfx").stream(shard_of(s, n)) for s, n in cases],
           "last": [Keys("pfx").last_turn(shard_of(s, n), s) for s, n in cases], "ttl": LAST_TURN_TTL_S,
           "deployment": Keys("pfx").deployment()}, sys.stdout)
`;
    const py = runPython<{ shards: number[]; keys: string[]; last: string[]; ttl: number; deployment: string }>(code, cases);
    assert.deepEqual(py.shards, cases.map(([s, n]) => shardOf(s, n)));
    assert.deepEqual(py.keys, cases.map(([s, n]) => streamKey("pfx", shardOf(s, n))));
    assert.deepEqual(py.last, cases.map(([s, n]) => lastTurnKey("pfx", shardOf(s, n), s)));
    assert.equal(py.ttl, LAST_TURN_TTL_S);
    assert.equal(py.deployment, deploymentKey("pfx"));
  });

  it("the shard map's streams, the tag generations and the publish script agree", { skip: available ? false : "workers/store/keys.py not available" }, () => {
    const cases: Array<[string, number, number, number]> = [];
    for (let i = 0; i < 200; i++) cases.push([`s-${i}`, 1 + (i % 4), i % 3, (1 + (i % 4)) * (1 + (i % 5))]);
    const code = `
import json, sys
from core.shard_map import ShardMap
from workers.store.keys import Keys
from workers.store.scripts import PUBLISH_TURN
cases = json.load(sys.stdin)
maps = [ShardMap(tags, generation, streams) for _, tags, generation, streams in cases]
json.dump({"streams": [Keys("pfx").stream(m.stream_of(s)) for (s, *_), m in zip(cases, maps)],
           "tags": [Keys("pfx").tag_generation(m.tag_of(s)) for (s, *_), m in zip(cases, maps)],
           "script": PUBLISH_TURN.source}, sys.stdout)
`;
    const py = runPython<{ streams: string[]; tags: string[]; script: string }>(code, cases);
    assert.deepEqual(py.streams, cases.map(([s, tags, generation, streams]) => mappedStreamKey("pfx", { tags, generation, streams }, s)));
    assert.deepEqual(py.tags, cases.map(([s, tags]) => tagGenerationKey("pfx", shardOf(s, tags))));
    assert.equal(py.script, PUBLISH_TURN_SCRIPT);
  });
});
