/**
 * Turn events into Redis streams, off the hot path.
 *
 * `enqueue()` only appends to an in-memory FIFO and wakes the sender; it never
 * waits for Redis. One sender loop at a time drains the FIFO head-first with
 * pipelined `XADD <key> * e <json>`, so a session's events reach
 * its stream in the order they were published. When Redis cannot be reached
 * the events stay buffered (bounded by count and bytes; the oldest are
 * dropped beyond the cap, and how many is logged) and the sender retries with
 * exponential backoff. An event is removed from the buffer only once Redis
 * acknowledged it; if the connection breaks after Redis applied an XADD but
 * before its reply arrived, that event is sent again on reconnect (same
 * event_id), so the stream can, rarely, hold one event twice. An event Redis
 * refuses with an error reply (say WRONGTYPE on the key) is dropped and
 * logged, so it cannot block the events behind it.
 *
 * With `replicas` (a deployment with Redis replicas), "acknowledged" means "held by that many
 * replicas too": after each batch the sender asks every stream's node to `WAIT` for them, and
 * a batch they do not confirm in time stays buffered and goes again (the stream may then hold
 * it twice; capture drops the second copy by its event_id). Without it a master that fails
 * right after acknowledging can take turns with it that its promoted replica never had.
 *
 * With a `spoolDir` every event is also written there (one file each, synchronously,
 * before `enqueue` returns) and removed once Redis took it, so a process that
 * exits or dies with events buffered (a one-shot `openclaw agent --local` while
 * Redis is down) loses none: the next publisher on that directory delivers them
 * first. Two processes sharing the directory may both deliver a file; capture
 * and assemble drop the second copy by its event_id.
 */

import { ErrorReply } from "redis";

import { openConnection, safeDestroy, type RedisConnection, type RedisTlsFiles } from "./connection.js";
import { EventBuffer, type EventTags, type Pending } from "./event_buffer.js";
import type { ShardMap } from "./keys.js";
import { OutageLog } from "./outage.js";
import { errorText, isTransient, replicaWaits, unreplicated } from "./replies.js";
import { publishCommand, readShardMap } from "./routing.js";

import type { PublisherOptions, PublisherStats } from "./publisher_options.js";

export type { EventTags } from "./event_buffer.js";
export type { PublisherOptions, PublisherStats } from "./publisher_options.js";

/** A publish the shard map had moved on from (a reshard closed its stream): read the map again. */
class MapMoved extends Error {}

/** A batch its replicas did not confirm in time (publishReplicas): kept and sent again. */
class NotReplicated extends Error {}

/** Map reloads in a row before a moved publish counts as a failure (with backoff). */
const MAX_MAP_RELOADS = 20;

export class TurnPublisher {
  private readonly opts: Required<PublisherOptions>;
  private readonly buffer: EventBuffer;
  private readonly outage: OutageLog;
  private client: RedisConnection | null = null;
  private running = false;
  private closed = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private backoffMs: number;
  private drainWaiters: Array<() => void> = [];
  private shardMap: ShardMap | null = null;
  private mapReloads = 0;
  private stats = { delivered: 0, dropped: 0, failures: 0 };

  constructor(options: PublisherOptions) {
    this.opts = {
      initialBackoffMs: 100,
      maxBackoffMs: 30_000,
      batchSize: 100,
      connectTimeoutMs: 3000,
      commandTimeoutMs: 15_000,
      spoolDir: "",
      tls: {},
      redisCluster: false,
      replicas: { count: 0, timeoutMs: 1000 },
      sentinels: { addresses: [], masterName: "mymaster" },
      shards: { count: 0, deploymentKey: "" },
      ...options,
    };
    this.backoffMs = this.opts.initialBackoffMs;
    this.buffer = new EventBuffer(this.opts.spoolDir, this.opts.logger);
    this.outage = new OutageLog(this.opts.logger);
    const loaded = this.buffer.loadSpool();
    this.enforceCaps();
    if (loaded > 0) {
      this.opts.logger.info(`ovstream: delivering ${loaded} turn event(s) an earlier run left in ${this.opts.spoolDir}`);
      this.kick();
    }
  }

  /** Buffer one encoded event for `key` and wake the sender; returns once it is spooled. */
  enqueue(key: string, payload: string, tags: EventTags = {}): void {
    if (this.closed) {
      this.stats.dropped += 1;
      this.opts.logger.warn(`ovstream: turn event for ${key} dropped: publisher is closed`);
      return;
    }
    this.buffer.add(key, payload, tags);
    this.enforceCaps();
    this.kick();
  }

  /** Payloads of the events still buffered for `session`, oldest first. */
  pendingFor(session: string): string[] {
    return this.buffer.pendingFor(session);
  }

  /** Retry now (resetting the backoff) instead of waiting for the timer. */
  flush(): void {
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    this.backoffMs = this.opts.initialBackoffMs;
    this.kick();
  }

  /** Resolves once every buffered event has been delivered. */
  drained(): Promise<void> {
    if (this.pendingCount() === 0 && !this.running) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /** `drained()`, or `timeoutMs` passed (a timer that keeps no process alive). */
  async drainedWithin(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.drained(),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }

  getStats(): PublisherStats {
    return {
      pending: this.pendingCount(),
      pendingBytes: this.buffer.bytes,
      delivered: this.stats.delivered,
      dropped: this.stats.dropped,
      failures: this.stats.failures,
      connected: this.client?.isReady === true,
    };
  }

  /**
   * Stop: try to deliver what is buffered within `timeoutMs`, then close the
   * connection. Whatever is still buffered then stays in the spool, or is lost
   * when it had none (both logged). Returns the events left: their spool file's
   * name, or "" for one kept in memory only (lost).
   */
  async close(timeoutMs = 2000): Promise<string[]> {
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    if (this.pendingCount() > 0 && !this.closed) {
      this.flush();
      await this.drainedWithin(timeoutMs);
    }
    this.closed = true;
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    const leftBehind = this.buffer.clear();
    const left = leftBehind.length;
    if (left > 0) {
      const spooled = leftBehind.filter((file) => file).length;
      this.stats.dropped += left - spooled;
      if (spooled > 0) {
        this.opts.logger.warn(
          `ovstream: Redis did not take ${left} turn event(s) before shutdown; ${spooled} are kept in ` +
            `${this.opts.spoolDir} and the next run delivers them` +
            (left > spooled ? `, ${left - spooled} are lost` : ""),
        );
      } else {
        this.opts.logger.warn(`ovstream: ${left} turn event(s) not delivered to Redis at shutdown`);
      }
    }
    const client = this.client;
    this.client = null;
    if (client) {
      try {
        if (client.isReady) {
          await client.close();
        } else {
          safeDestroy(client);
        }
      } catch {
        safeDestroy(client);
      }
    }
    this.resolveDrainWaiters();
    return leftBehind;
  }

  private pendingCount(): number {
    return this.buffer.count;
  }

  private enforceCaps(): void {
    const dropped = this.buffer.dropOverCaps(this.opts.maxEvents, this.opts.maxBytes);
    if (dropped > 0) {
      this.stats.dropped += dropped;
      this.outage.droppedOverCaps(dropped, this.opts.maxEvents, this.opts.maxBytes);
    }
  }

  private kick(): void {
    if (this.running || this.closed || this.retryTimer !== null || this.pendingCount() === 0) {
      if (this.pendingCount() === 0 && !this.running) {
        this.resolveDrainWaiters();
      }
      return;
    }
    this.running = true;
    void this.run().finally(() => {
      this.running = false;
      if (this.pendingCount() === 0) {
        this.resolveDrainWaiters();
      } else if (!this.closed && this.retryTimer === null) {
        // Events arrived after the last batch while we were finishing.
        this.kick();
      }
    });
  }

  private resolveDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }

  private async run(): Promise<void> {
    while (this.pendingCount() > 0 && !this.closed) {
      try {
        const client = await this.connected();
        await this.sendBatch(client);
      } catch (err) {
        if (err instanceof MapMoved && this.client && this.mapReloads < MAX_MAP_RELOADS) {
          this.mapReloads += 1;
          try {
            await this.checkShards(this.client); // the new map; the rest of the batch is sent again
            continue;
          } catch (reloadErr) {
            err = reloadErr;
          }
        }
        this.onFailure(err);
        return;
      }
      this.mapReloads = 0;
      this.onSuccess();
    }
  }

  private async connected(): Promise<RedisConnection> {
    if (this.client?.isReady) {
      return this.client;
    }
    this.dropClient();
    const client = await openConnection({
      url: this.opts.redisUrl,
      cluster: this.opts.redisCluster,
      sentinels: this.opts.sentinels,
      tls: this.opts.tls,
      connectTimeoutMs: this.opts.connectTimeoutMs,
      logger: this.opts.logger,
    });
    try {
      await this.checkShards(client);
    } catch (err) {
      safeDestroy(client);
      throw err;
    }
    this.client = client;
    if (this.closed) {
      // close() ran while we were connecting: this connection must not linger.
      this.client = null;
      safeDestroy(client);
      throw new Error("publisher closed");
    }
    return client;
  }

  private async checkShards(client: RedisConnection): Promise<void> {
    this.shardMap = (await readShardMap(client, this.opts.shards, this.shardMap, this.opts.logger)) ?? this.shardMap;
  }

  private dropClient(): void {
    const client = this.client;
    this.client = null;
    if (client) {
      safeDestroy(client);
    }
  }

  private async sendBatch(client: RedisConnection): Promise<void> {
    const batch = this.buffer.batch(this.opts.batchSize);
    // Commands issued in one tick go out as one pipeline; a turn's mark follows its XADD.
    const commands = batch.map((item) => publishCommand(this.opts.shards.keyPrefix, this.shardMap, item));
    const replies = batch.map((item, i) => {
      const command = commands[i]!;
      const reply = client.send(command.key, command.args);
      const mark = item.lastTurn;
      if (mark && command.args[0] === "XADD") {
        // Best effort: without it assemble misses only another process's lagging turn.
        client.send(mark.key, ["SET", mark.key, mark.eventId, "EX", String(mark.ttlS)]).catch(() => undefined);
      }
      return reply;
    });
    // WAIT covers every write before it on its connection: one per stream (so per node), last.
    const { count: replicas, timeoutMs: replicaTimeoutMs } = this.opts.replicas;
    const waits = replicaWaits(client, commands.map((c) => c.key), replicas, replicaTimeoutMs);
    const timer = setTimeout(() => safeDestroy(client), this.opts.commandTimeoutMs + this.opts.replicas.timeoutMs);
    timer.unref();
    let results: PromiseSettledResult<unknown>[];
    let short: Set<string>;
    try {
      results = await Promise.allSettled(replies);
      short = await unreplicated(waits, replicas);
    } finally {
      clearTimeout(timer);
    }
    let failure: unknown = undefined;
    for (const [i, result] of results.entries()) {
      const item = batch[i];
      const stream = commands[i]?.key ?? "";
      if (short.has(stream)) {
        failure = new NotReplicated(
          `Redis did not confirm ${this.opts.replicas.count} replica(s) of ${stream} within ` +
            `${this.opts.replicas.timeoutMs} ms (publishReplicas); the turns stay buffered and are sent again`,
        );
        break;
      }
      if (result.status === "fulfilled" && Array.isArray(result.value) && Number(result.value[0]) === 0) {
        // A reshard closed this stream: this and the rest go again to the new map's streams.
        failure = new MapMoved(
          `the service is resharding: this stream's tag is at generation ${String(result.value[1])}, ` +
            `the plugin's map at ${String(this.shardMap?.generation ?? 0)}; the turns wait and are sent again`,
        );
        break;
      }
      if (result.status === "rejected" && !(result.reason instanceof ErrorReply && !isTransient(result.reason))) {
        // The connection failed, or Redis cannot take the write just now (full, loading,
        // failing over): this and the rest stay buffered, in order, and are sent again.
        failure = result.reason;
        break;
      }
      this.buffer.taken(item);
      if (result.status === "fulfilled") {
        this.stats.delivered += 1;
        this.outage.deliveredOne();
      } else {
        this.stats.dropped += 1;
        this.opts.logger.error(
          `ovstream: Redis refused a turn event for ${item?.key ?? "?"} (${errorText(result.reason)}); event dropped`,
        );
      }
    }
    this.buffer.compact();
    if (failure !== undefined) {
      throw failure;
    }
  }

  private onSuccess(): void {
    this.outage.succeeded(this.pendingCount());
    this.backoffMs = this.opts.initialBackoffMs;
  }

  private onFailure(err: unknown): void {
    this.dropClient();
    if (this.closed) {
      return;
    }
    this.stats.failures += 1;
    const delay = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, this.opts.maxBackoffMs);
    this.outage.failed(err, this.pendingCount(), delay);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.kick();
    }, delay);
    // The buffer must not keep a host that is shutting down alive.
    this.retryTimer.unref();
  }
}

export { isTransient } from "./replies.js";
