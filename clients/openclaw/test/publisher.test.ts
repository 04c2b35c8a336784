import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import { spawnSync } from "node:child_process";

import { createClient, createCluster } from "redis";

import { redisTlsSocket } from "../src/connection.js";
import { mappedStreamKey, shardOf, tagGenerationKey } from "../src/keys.js";
import { TurnPublisher } from "../src/publisher.js";
import { MemoryLogger } from "./helpers/fakes.js";
import { KEY, publisher, readStream } from "./helpers/publishing.js";
import { freePort, makePki, pythonHasModule, startRedis, startRedisCluster, startSentinel, startTlsRedis, waitFor, type RedisServer } from "./helpers/proc.js";

describe("TurnPublisher", () => {
  const servers: RedisServer[] = [];
  const publishers: TurnPublisher[] = [];
  after(async () => {
    for (const p of publishers) await p.close(100);
    for (const s of servers) await s.stop();
  });

  /** A Redis whose deployment record holds `deployment`, and a publisher of `count` shards on it. */
  async function deployed(deployment: Record<string, string>, count: number, keyPrefix?: string) {
    const redis = await startRedis();
    servers.push(redis);
    const admin = createClient({ url: redis.url });
    await admin.connect();
    await admin.hSet("t:deployment", deployment);
    const log = new MemoryLogger();
    const pub = publisher(redis.url, log, { shards: { count, deploymentKey: "t:deployment", keyPrefix } });
    publishers.push(pub);
    return { redis, admin, log, pub };
  }

  it("buffers while Redis is down, drops the oldest beyond the cap, delivers in order once Redis is up", async () => {
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}/0`;
    const log = new MemoryLogger();
    const pub = publisher(url, log, { maxEvents: 3 });
    publishers.push(pub);

    for (let i = 0; i < 5; i++) pub.enqueue(KEY, `event-${i}`);
    // enqueue never waits for Redis: all five are accounted for at once.
    assert.equal(pub.getStats().pending, 3);
    assert.equal(pub.getStats().dropped, 2);

    await waitFor("a failed delivery attempt", () => pub.getStats().failures >= 2);
    assert.equal(pub.getStats().pending, 3);
    assert.equal(pub.getStats().delivered, 0);
    assert.ok(log.at("warn").some((m) => m.includes("cannot publish turn events to Redis")), log.at("warn").join("\n"));
    assert.ok(log.at("warn").some((m) => m.includes("dropping the oldest")), log.at("warn").join("\n"));
    assert.ok(log.at("warn").some((m) => m.includes("ECONNREFUSED") && m.includes("2 oldest dropped")), log.at("warn").join("\n"));

    const redis = await startRedis(port);
    servers.push(redis);
    pub.flush();
    await waitFor("the buffer to drain", async () => {
      await pub.drained();
      return true;
    });
    assert.deepEqual(await readStream(url), ["event-2", "event-3", "event-4"]);
    assert.equal(pub.getStats().pending, 0);
    assert.equal(pub.getStats().delivered, 3);
    assert.ok(
      log.at("info").some((m) => m.includes("Redis reachable again") && m.includes("delivered 3") && m.includes("2 were dropped")),
      log.at("info").join("\n"),
    );
  });

  it("keeps delivering across a Redis restart, in order, without losing buffered events", async () => {
    const redis = await startRedis();
    servers.push(redis);
    const log = new MemoryLogger();
    const pub = publisher(redis.url, log);
    publishers.push(pub);

    pub.enqueue(KEY, "a");
    pub.enqueue(KEY, "b");
    await pub.drained();
    assert.deepEqual(await readStream(redis.url), ["a", "b"]);

    await redis.stop();
    pub.enqueue(KEY, "c");
    pub.enqueue(KEY, "d");
    await waitFor("a failed delivery", () => pub.getStats().failures >= 1);
    assert.equal(pub.getStats().pending, 2);

    const again = await startRedis(redis.port);
    servers.push(again);
    pub.flush();
    await pub.drained();
    // A fresh (empty, non-persistent) server: only what was buffered arrives.
    assert.deepEqual(await readStream(again.url), ["c", "d"]);
  });

  it("publishes to a Redis Cluster: every shard's stream on its node, in order, with its last-turn mark", async () => {
    const cluster = await startRedisCluster(3);
    servers.push({ port: 0, url: cluster.url, stop: cluster.stop });
    const log = new MemoryLogger();
    const pub = publisher(cluster.url, log, { redisCluster: true });
    publishers.push(pub);
    const shards = 16;
    for (let i = 0; i < 20; i++) {
      for (let shard = 0; shard < shards; shard++) {
        const key = `c:{s${shard}}:turns`;
        pub.enqueue(key, `e${i}`, { lastTurn: { key: `c:{s${shard}}:last-turn:x`, eventId: `e${i}`, ttlS: 60 } });
      }
    }
    await pub.drained();
    assert.equal(pub.getStats().delivered, 20 * shards, JSON.stringify([pub.getStats(), log.lines]));
    const reader = createCluster({ rootNodes: [{ url: cluster.url }] });
    reader.on("error", () => {});
    await reader.connect();
    try {
      for (let shard = 0; shard < shards; shard++) {
        const entries = await reader.xRange(`c:{s${shard}}:turns`, "-", "+");
        assert.deepEqual(entries.map((e) => String(e.message.e)), Array.from({ length: 20 }, (_, i) => `e${i}`));
        assert.equal(await reader.get(`c:{s${shard}}:last-turn:x`), "e19");
      }
      // the streams really are spread: every master holds some of them
      const holding = cluster.nodes.map((n) => Number(spawnSync("redis-cli", ["-p", String(n.port), "dbsize"], { encoding: "utf8" }).stdout.trim()));
      assert.ok(holding.every((keys) => keys > 0), `keys per node: ${holding}`);
    } finally {
      await reader.close();
    }
  });

  it("with publishReplicas, counts a turn delivered only once a replica holds it, and sends again what none confirmed", async () => {
    const master = await startRedis();
    const replica = await startRedis();
    servers.push(master, replica);
    const cli = (port: number, ...args: string[]) => spawnSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8" }).stdout;
    const follow = () => cli(replica.port, "replicaof", "127.0.0.1", String(master.port));
    follow();
    await waitFor("the replica linked", () => cli(replica.port, "info", "replication").includes("master_link_status:up"));
    const log = new MemoryLogger();
    const pub = publisher(master.url, log, { replicas: { count: 1, timeoutMs: 200 } });
    publishers.push(pub);
    pub.enqueue(KEY, "a");
    await pub.drained();
    // delivered means on the replica too; a busy machine may pass WAIT's 200 ms first, and the
    // turn is sent again until confirmed (capture drops the copies by event id)
    assert.deepEqual([...new Set(await readStream(replica.url))], ["a"]);

    cli(replica.port, "replicaof", "no", "one"); // the replica stops following: WAIT counts none
    await waitFor("the master without replicas", () => cli(master.port, "info", "replication").includes("connected_slaves:0"));
    pub.enqueue(KEY, "b");
    await waitFor("an unconfirmed delivery", () => pub.getStats().failures >= 1);
    assert.equal(pub.getStats().pending, 1, "a turn no replica confirmed stays buffered");
    assert.ok(log.lines.some((l) => l.message.includes("publishReplicas")), JSON.stringify(log.lines));

    follow();
    await pub.drained();
    assert.equal(pub.getStats().delivered, 2);
    // Sent again until confirmed: the stream may hold "b" more than once (capture drops copies by event id).
    assert.deepEqual([...new Set(await readStream(replica.url))], ["a", "b"]);
  });

  it("publishes through Redis Sentinels, and goes on to the replica they promote when the master dies", async () => {
    const master = await startRedis();
    const replica = await startRedis();
    servers.push(replica, master);
    const cli = (port: number, ...args: string[]) => spawnSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8" }).stdout;
    cli(replica.port, "replicaof", "127.0.0.1", String(master.port));
    await waitFor("the replica linked", () => cli(replica.port, "info", "replication").includes("master_link_status:up"));
    const sentinel = await startSentinel(master.port, "ovs");
    servers.push(sentinel);
    const log = new MemoryLogger();
    // the URL's host is never used: the Sentinels say where the master is
    const pub = publisher("redis://127.0.0.1:1/0", log, { sentinels: { addresses: [`127.0.0.1:${sentinel.port}`], masterName: "ovs" } });
    publishers.push(pub);
    pub.enqueue(KEY, "a");
    await pub.drained();
    assert.deepEqual(await readStream(master.url), ["a"]);
    await waitFor("a on the replica", async () => (await readStream(replica.url)).length === 1);

    await master.stop();
    pub.enqueue(KEY, "b");
    await pub.drained();
    assert.ok(cli(replica.port, "info", "replication").includes("role:master"), "the Sentinel promoted the replica");
    assert.deepEqual(await readStream(replica.url), ["a", "b"]);
  });

  it("publishes nothing while the service runs with another shard count, and says so", async () => {
    // as the service's first process records it
    const { redis, admin, log, pub } = await deployed({ shards: "8" }, 4);
    pub.enqueue(KEY, "kept");
    await waitFor("a refused connection", () => pub.getStats().failures >= 1);
    assert.equal(pub.getStats().pending, 1);
    assert.deepEqual(await readStream(redis.url), []);
    assert.ok(log.at("warn").some((m) => m.includes("shards = 4 in the plugin's config, but the ovstream service runs with shards = 8")), log.at("warn").join("\n"));
    await admin.hSet("t:deployment", "shards", "4");  // the config fixed (here: the record)
    pub.flush();
    await pub.drained();
    assert.deepEqual(await readStream(redis.url), ["kept"]);
    await admin.close();
  });

  it("follows a reshard: a closed stream refuses, the map is read again, the turns go to the new streams in order", async () => {
    const { admin, log, pub } = await deployed({ shards: "4" }, 4, "t");
    const sessions = Array.from({ length: 12 }, (_, i) => `rs-${i}`);
    const send = (n: number) => {
      for (const s of sessions) {
        const tag = shardOf(s, 4);
        pub.enqueue("ignored", `${s}:${n}`, { session: s, lastTurn: { key: `t:{s${tag}}:last-turn:${s}`, eventId: `${s}:${n}`, ttlS: 60 } });
      }
    };
    send(0);
    await pub.drained();
    const before = { tags: 4, generation: 0, streams: 4 };
    // what `ovstream reshard --shards 8` does: the new map, then every tag closed
    await admin.hSet("t:deployment", { generation: "1", streams: "8", previous: "0.4" });
    for (let tag = 0; tag < 4; tag++) await admin.set(tagGenerationKey("t", tag), "1");
    send(1);
    send(2);
    await pub.drained();
    const after = { tags: 4, generation: 1, streams: 8 };
    for (const s of sessions) {
      const old = (await admin.xRange(mappedStreamKey("t", before, s), "-", "+")).map((e) => String(e.message.e)).filter((e) => e.startsWith(`${s}:`));
      const now = (await admin.xRange(mappedStreamKey("t", after, s), "-", "+")).map((e) => String(e.message.e)).filter((e) => e.startsWith(`${s}:`));
      assert.deepEqual([old, now], [[`${s}:0`], [`${s}:1`, `${s}:2`]], s);
      assert.equal(await admin.get(`t:{s${shardOf(s, 4)}}:last-turn:${s}`), `${s}:2`);
    }
    assert.equal(pub.getStats().dropped, 0);
    assert.ok(log.at("info").some((m) => m.includes("generation 1 (8 shards)")), log.lines.join("\n"));
    await admin.close();
  });

  it("keeps the turns of a tag a reshard has not closed yet, and sends them once it is", async () => {
    // the new map is written, but `ovstream reshard` stopped before closing any tag
    const { admin, log, pub } = await deployed({ shards: "4", generation: "1", streams: "8", previous: "0.4" }, 4, "t");
    pub.enqueue("ignored", "waiting", { session: "mid-reshard" });
    await waitFor("a refused publish", () => pub.getStats().failures >= 1);
    assert.equal(pub.getStats().pending, 1);
    assert.ok(log.at("warn").some((m) => m.includes("the service is resharding")), log.lines.join("\n"));
    for (let tag = 0; tag < 4; tag++) await admin.set(tagGenerationKey("t", tag), "1"); // what capture finishes
    pub.flush();
    await pub.drained();
    const stream = mappedStreamKey("t", { tags: 4, generation: 1, streams: 8 }, "mid-reshard");
    assert.deepEqual((await admin.xRange(stream, "-", "+")).map((e) => String(e.message.e)), ["waiting"]);
    await admin.close();
  });

  it("caps the buffer by bytes too, always keeping the newest event", async () => {
    const port = await freePort();
    const log = new MemoryLogger();
    // Each entry counts its payload plus its key (13 bytes here): 53 bytes.
    const pub = publisher(`redis://127.0.0.1:${port}/0`, log, { maxBytes: 120 });
    publishers.push(pub);
    pub.enqueue(KEY, "x".repeat(40));
    pub.enqueue(KEY, "y".repeat(40));
    assert.equal(pub.getStats().pending, 2);
    pub.enqueue(KEY, "z".repeat(40));
    assert.equal(pub.getStats().pending, 2);
    pub.enqueue(KEY, "w".repeat(500));
    assert.equal(pub.getStats().pending, 1);
    assert.equal(pub.getStats().dropped, 3);
    await pub.close(50);
  });

  it("publishes to a TLS Redis that requires a client certificate", { skip: pythonHasModule("trustme") ? false : "trustme (the test CA) not installed" }, async () => {
    const pki = makePki();
    const redis = await startTlsRedis(pki);
    servers.push(redis);
    const tls = { caFile: pki.caFile, certFile: pki.clientCertFile, keyFile: pki.clientKeyFile };
    const pub = publisher(redis.url, new MemoryLogger(), { tls });
    publishers.push(pub);
    pub.enqueue(KEY, "over-tls");
    await pub.drained();
    assert.equal(pub.getStats().delivered, 1);
    const reader = createClient({ url: redis.url, socket: redisTlsSocket(redis.url, tls) as never });
    reader.on("error", () => {});
    await reader.connect();
    try {
      assert.deepEqual((await reader.xRange(KEY, "-", "+")).map((e) => String(e.message.e)), ["over-tls"]);
    } finally {
      await reader.close();
    }
    const untrusted = publisher(redis.url, new MemoryLogger(), { tls: { caFile: pki.caFile } });  // no client certificate
    publishers.push(untrusted);
    untrusted.enqueue(KEY, "refused");
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(untrusted.getStats().delivered, 0);
    assert.equal(untrusted.getStats().pending, 1);  // kept, as in any outage
  });

  it("caps no stream: every event stays until capture has applied it", async () => {
    const redis = await startRedis();
    servers.push(redis);
    const pub = publisher(redis.url, new MemoryLogger());
    publishers.push(pub);
    for (let i = 0; i < 450; i++) pub.enqueue(KEY, `n${i}`);
    await pub.drained();
    const entries = await readStream(redis.url);
    assert.equal(entries.length, 450);
    assert.equal(entries.at(-1), "n449");
    assert.equal(pub.getStats().delivered, 450);
  });

  it("drops (and logs) an event Redis refuses, without blocking the ones behind it", async () => {
    const redis = await startRedis();
    servers.push(redis);
    const admin = createClient({ url: redis.url });
    admin.on("error", () => {});
    await admin.connect();
    await admin.set("t:{s1}:turns", "not a stream");
    await admin.close();
    const log = new MemoryLogger();
    const pub = publisher(redis.url, log);
    publishers.push(pub);
    pub.enqueue(KEY, "before");
    pub.enqueue("t:{s1}:turns", "poison");
    pub.enqueue(KEY, "after");
    await pub.drained();
    assert.deepEqual(await readStream(redis.url), ["before", "after"]);
    assert.equal(pub.getStats().dropped, 1);
    assert.ok(log.at("error").some((m) => m.includes("WRONGTYPE") && m.includes("t:{s1}:turns")), log.at("error").join("\n"));
  });

  it("keeps (and later delivers) events a full Redis refuses with OOM, in order", async () => {
    const redis = await startRedis();
    servers.push(redis);
    const admin = createClient({ url: redis.url });
    admin.on("error", () => {});
    await admin.connect();
    await admin.sendCommand(["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    await admin.sendCommand(["CONFIG", "SET", "maxmemory", "1"]);
    const log = new MemoryLogger();
    const pub = publisher(redis.url, log);
    publishers.push(pub);
    pub.enqueue(KEY, "first");
    pub.enqueue(KEY, "second");
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(pub.getStats().dropped, 0);
    assert.equal(pub.getStats().pending, 2);
    await admin.sendCommand(["CONFIG", "SET", "maxmemory", "0"]);
    await admin.close();
    await pub.drained();
    assert.deepEqual(await readStream(redis.url), ["first", "second"]);
    assert.equal(pub.getStats().dropped, 0);
  });

  it("close() delivers what is buffered when it can, then refuses new events", async () => {
    const redis = await startRedis();
    servers.push(redis);
    const log = new MemoryLogger();
    const pub = publisher(redis.url, log);
    pub.enqueue(KEY, "last-words");
    await pub.close(5000);
    assert.deepEqual(await readStream(redis.url), ["last-words"]);
    pub.enqueue(KEY, "too-late");
    assert.equal(pub.getStats().pending, 0);
    assert.ok(log.at("warn").some((m) => m.includes("publisher is closed")));
  });
});
