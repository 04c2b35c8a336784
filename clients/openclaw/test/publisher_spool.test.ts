import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { createClient } from "redis";

import { MemoryLogger } from "./helpers/fakes.js";
import { freePort, startRedis, waitFor, type RedisServer } from "./helpers/proc.js";
import { KEY, publisher, readStream } from "./helpers/publishing.js";

describe("TurnPublisher spool", () => {
  it("keeps what Redis did not take across processes, and the next publisher delivers it first", async () => {
    const { mkdtempSync, readdirSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const spoolDir = mkdtempSync(join(tmpdir(), "ovstream-spool-"));
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}/0`;
    const log1 = new MemoryLogger();
    const first = publisher(url, log1, { spoolDir });
    first.enqueue(KEY, '{"n":1}', { session: "s" });
    first.enqueue(KEY, '{"n":2}', { session: "other" });
    assert.deepEqual(first.pendingFor("s"), ['{"n":1}']);
    await first.close(50); // Redis is down: nothing delivered
    assert.equal(readdirSync(spoolDir).length, 2);
    assert.ok(log1.at("warn").some((m) => m.includes("kept in") && m.includes("next run delivers")));

    const redis: RedisServer = await startRedis(port);
    try {
      const log2 = new MemoryLogger();
      const second = publisher(url, log2, { spoolDir });
      second.enqueue(KEY, '{"n":3}', { session: "s", lastTurn: { key: "t:{s0}:last-turn:s", eventId: "e3", ttlS: 60 } });
      await waitFor("three events in the stream", async () => (await readStream(url)).length === 3);
      assert.deepEqual(await readStream(url), ['{"n":1}', '{"n":2}', '{"n":3}']);
      const check = createClient({ url });
      check.on("error", () => {});
      await check.connect();
      assert.equal(await check.get("t:{s0}:last-turn:s"), "e3"); // the turn's mark went with its XADD
      await check.close();
      assert.ok(log2.at("info").some((m) => m.includes("delivering 2 turn event(s) an earlier run left")));
      await second.close(1000);
      assert.equal(readdirSync(spoolDir).length, 0);
    } finally {
      await redis.stop();
    }
  });
});
