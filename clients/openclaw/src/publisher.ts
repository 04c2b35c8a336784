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

import { mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { ErrorReply } from "redis";

import { openConnection, safeDestroy, type RedisConnection, type RedisTlsFiles } from "./connection.js";
import { mappedStreamKey, PUBLISH_TURN_SCRIPT, shardOf, tagGenerationKey, type ShardMap } from "./keys.js";

import type { PluginLogger } from "./types.js";

export interface PublisherOptions {
  redisUrl: string;
  /** redisUrl names one node of a Redis Cluster; each command goes to its key's node. */
  redisCluster?: boolean;
  /** Redis behind Sentinels: their host:port and the master's name (see connection.ts). */
  sentinels?: { addresses: string[]; masterName: string };
  /** Replicas that must hold each event before it counts as delivered (Redis WAIT), and how
   * long to wait for them; count 0 (the default): the master's reply is enough. */
  replicas?: { count: number; timeoutMs: number };
  /**
   * The shard count the plugin publishes with, checked on connecting against the one the
   * service recorded (`deploymentKey`): on a mismatch nothing is published, the events stay
   * buffered and the warning says why (they would land on streams capture does not read).
   * With `keyPrefix`, an event tagged with its `session` goes to that session's stream in the
   * deployment's shard map (read on connecting, and again when a reshard closed a stream),
   * whatever `key` it was enqueued with.
   */
  shards?: { count: number; deploymentKey: string; keyPrefix?: string };
  logger: PluginLogger;
  /** Buffer caps; the oldest events go first when either is exceeded. */
  maxEvents: number;
  maxBytes: number;
  /** First retry delay after a failure; doubles up to maxBackoffMs. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Events per pipelined batch. */
  batchSize?: number;
  connectTimeoutMs?: number;
  /** A batch not answered within this is treated as a broken connection. */
  commandTimeoutMs?: number;
  /** Where undelivered events survive the process (see above); none: memory only. */
  spoolDir?: string;
  /** For a rediss:// URL: PEM files of the CA verifying Redis, and a client certificate. */
  tls?: RedisTlsFiles;
}

/** What the publisher knows of an event besides its stream and payload. */
export interface EventTags {
  /** The event's (OV) session, for `pendingFor`. */
  session?: string;
  /** SET with the XADD, in the same pipeline: the session's newest turn. */
  lastTurn?: { key: string; eventId: string; ttlS: number };
}

interface Pending extends EventTags {
  key: string;
  payload: string;
  bytes: number;
  /** Its spool file, removed once the event is delivered or dropped. */
  file?: string;
}

interface SpoolRecord extends EventTags {
  key: string;
  payload: string;
}

export interface PublisherStats {
  pending: number;
  pendingBytes: number;
  delivered: number;
  dropped: number;
  failures: number;
  connected: boolean;
}

/** A publish the shard map had moved on from (a reshard closed its stream): read the map again. */
class MapMoved extends Error {}

/** A batch its replicas did not confirm in time (publishReplicas): kept and sent again. */
class NotReplicated extends Error {}

/** Map reloads in a row before a moved publish counts as a failure (with backoff). */
const MAX_MAP_RELOADS = 20;

function errorText(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) {
    return errorText(err.errors[0]);
  }
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    return code && !err.message.includes(code) ? `${code}: ${err.message}` : err.message || err.name;
  }
  return String(err);
}

export class TurnPublisher {
  private readonly opts: Required<PublisherOptions>;
  private readonly queue: Pending[] = [];
  private head = 0;
  private queuedBytes = 0;
  private client: RedisConnection | null = null;
  private running = false;
  private closed = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private backoffMs: number;
  private outage = false;
  private droppedInOutage = 0;
  private deliveredInOutage = 0;
  private retriesInOutage = 0;
  private drainWaiters: Array<() => void> = [];
  private spoolSeq = 0;
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
    this.loadSpool();
  }

  /** Buffer one encoded event for `key` and wake the sender; returns once it is spooled. */
  enqueue(key: string, payload: string, tags: EventTags = {}): void {
    if (this.closed) {
      this.stats.dropped += 1;
      this.opts.logger.warn(`ovstream: turn event for ${key} dropped: publisher is closed`);
      return;
    }
    const item: Pending = { key, payload, bytes: Buffer.byteLength(payload, "utf8") + key.length, ...tags };
    item.file = this.spool({ key, payload, ...tags });
    this.push(item);
    this.kick();
  }

  /** Payloads of the events still buffered for `session`, oldest first. */
  pendingFor(session: string): string[] {
    const out: string[] = [];
    for (let i = this.head; i < this.queue.length; i++) {
      const item = this.queue[i];
      if (item?.session === session) out.push(item.payload);
    }
    return out;
  }

  private push(item: Pending): void {
    this.queue.push(item);
    this.queuedBytes += item.bytes;
    this.enforceCaps();
  }

  private spool(record: SpoolRecord): string | undefined {
    const dir = this.opts.spoolDir;
    if (!dir) return undefined;
    this.spoolSeq += 1;
    const name = `${Date.now().toString().padStart(15, "0")}-${process.pid}-${this.spoolSeq}.json`;
    try {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, name), JSON.stringify(record), { mode: 0o600 });
      return name;
    } catch (err) {
      this.opts.logger.warn(`ovstream: cannot spool a turn event to ${dir} (${errorText(err)}); it is kept in memory only`);
      return undefined;
    }
  }

  private unspool(item: Pending | undefined): void {
    if (!item?.file) return;
    try {
      unlinkSync(join(this.opts.spoolDir, item.file));
    } catch {
      // another process delivered (and removed) it first
    }
    item.file = undefined;
  }

  /** Events an earlier process spooled and did not deliver go first, oldest first. */
  private loadSpool(): void {
    const dir = this.opts.spoolDir;
    if (!dir) return;
    let names: string[];
    try {
      names = readdirSync(dir).filter((n) => n.endsWith(".json")).sort();
    } catch {
      return; // no spool yet
    }
    let loaded = 0;
    for (const name of names) {
      try {
        const record = JSON.parse(readFileSync(join(dir, name), "utf8")) as SpoolRecord;
        if (typeof record.key !== "string" || typeof record.payload !== "string") throw new Error("not a spooled event");
        const bytes = Buffer.byteLength(record.payload, "utf8") + record.key.length;
        this.push({ ...record, bytes, file: name });
        loaded += 1;
      } catch (err) {
        this.opts.logger.warn(`ovstream: spool file ${join(dir, name)} is unreadable (${errorText(err)}); left in place`);
      }
    }
    if (loaded > 0) {
      this.opts.logger.info(`ovstream: delivering ${loaded} turn event(s) an earlier run left in ${dir}`);
      this.kick();
    }
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
      pendingBytes: this.queuedBytes,
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
    const leftBehind = this.queue.slice(this.head).map((item) => item.file ?? "");
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
      this.queue.length = 0;
      this.head = 0;
      this.queuedBytes = 0;
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
    return this.queue.length - this.head;
  }

  private enforceCaps(): void {
    let dropped = 0;
    while (
      this.pendingCount() > 1 &&
      (this.pendingCount() > this.opts.maxEvents || this.queuedBytes > this.opts.maxBytes)
    ) {
      const old = this.queue[this.head];
      this.head += 1;
      if (old) {
        this.queuedBytes -= old.bytes;
        this.unspool(old);
      }
      dropped += 1;
    }
    this.compact();
    if (dropped > 0) {
      const firstInOutage = this.droppedInOutage === 0;
      this.stats.dropped += dropped;
      this.droppedInOutage += dropped;
      if (firstInOutage) {
        this.opts.logger.warn(
          `ovstream: turn buffer full (${this.opts.maxEvents} events / ${this.opts.maxBytes} bytes); ` +
            `dropping the oldest buffered turn events (${this.droppedInOutage} dropped so far)`,
        );
      } else {
        this.opts.logger.debug?.(`ovstream: dropped ${dropped} more turn event(s) (${this.droppedInOutage} in this outage)`);
      }
    }
  }

  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
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
    const { count, deploymentKey } = this.opts.shards;
    if (!deploymentKey) return;
    const reply = await client.send(deploymentKey, ["HGETALL", deploymentKey]);
    const fields = new Map<string, string>();
    if (Array.isArray(reply)) {
      for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), String(reply[i + 1]));
    }
    const recorded = fields.get("shards");
    if (recorded !== undefined && recorded !== String(count)) {
      throw new Error(
        `shards = ${count} in the plugin's config, but the ovstream service runs with shards = ${recorded}; ` +
          "set the plugin's shards to the service's (turns stay buffered until then)",
      );
    }
    const map: ShardMap = {
      tags: count,
      generation: Number(fields.get("generation") ?? 0),
      streams: Number(fields.get("streams") ?? count),
    };
    if (this.shardMap && this.shardMap.generation !== map.generation) {
      this.opts.logger.info(
        `ovstream: the service's turn streams are now generation ${map.generation} (${map.streams} shards); publishing there`,
      );
    }
    this.shardMap = map;
  }

  /** The command publishing `item`: routed by the shard map when it names its session. */
  private publishCommand(item: Pending): { key: string; args: string[] } {
    const prefix = this.opts.shards.keyPrefix;
    const map = this.shardMap;
    if (!prefix || !map || !item.session) {
      // No MAXLEN: a producer cannot know what capture applied; capture trims that itself.
      return { key: item.key, args: ["XADD", item.key, "*", "e", item.payload] };
    }
    const stream = mappedStreamKey(prefix, map, item.session);
    const keys = [tagGenerationKey(prefix, shardOf(item.session, map.tags)), stream];
    const mark = item.lastTurn;
    if (mark) keys.push(mark.key);
    const args = [String(map.generation), "e", item.payload, mark?.eventId ?? "", String(mark?.ttlS ?? 0)];
    return { key: stream, args: ["EVAL", PUBLISH_TURN_SCRIPT, String(keys.length), ...keys, ...args] };
  }

  private dropClient(): void {
    const client = this.client;
    this.client = null;
    if (client) {
      safeDestroy(client);
    }
  }

  private async sendBatch(client: RedisConnection): Promise<void> {
    const end = Math.min(this.queue.length, this.head + this.opts.batchSize);
    const batch = this.queue.slice(this.head, end);
    // Commands issued in one tick go out as one pipeline; a turn's mark follows its XADD.
    const commands = batch.map((item) => this.publishCommand(item));
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
    const waits = this.replicaWaits(client, commands.map((c) => c.key));
    const timer = setTimeout(() => safeDestroy(client), this.opts.commandTimeoutMs + this.opts.replicas.timeoutMs);
    timer.unref();
    let results: PromiseSettledResult<unknown>[];
    let unreplicated: Set<string>;
    try {
      results = await Promise.allSettled(replies);
      unreplicated = await this.unreplicated(waits);
    } finally {
      clearTimeout(timer);
    }
    let failure: unknown = undefined;
    for (const [i, result] of results.entries()) {
      const item = batch[i];
      const stream = commands[i]?.key ?? "";
      if (unreplicated.has(stream)) {
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
      // The head may have moved if enforceCaps dropped entries meanwhile.
      if (item && this.queue[this.head] === item) {
        this.head += 1;
        this.queuedBytes -= item.bytes;
      }
      this.unspool(item);
      if (result.status === "fulfilled") {
        this.stats.delivered += 1;
        this.deliveredInOutage += 1;
      } else {
        this.stats.dropped += 1;
        this.opts.logger.error(
          `ovstream: Redis refused a turn event for ${item?.key ?? "?"} (${errorText(result.reason)}); event dropped`,
        );
      }
    }
    this.compact();
    if (failure !== undefined) {
      throw failure;
    }
  }

  private replicaWaits(client: RedisConnection, streams: string[]): Map<string, Promise<unknown>> {
    const waits = new Map<string, Promise<unknown>>();
    const { count, timeoutMs } = this.opts.replicas;
    if (count <= 0) return waits;
    for (const stream of streams) {
      if (!waits.has(stream)) {
        const wait = client.send(stream, ["WAIT", String(count), String(timeoutMs)]);
        wait.catch(() => undefined); // read in unreplicated()
        waits.set(stream, wait);
      }
    }
    return waits;
  }

  /** The streams whose WAIT counted fewer replicas than asked (or failed). */
  private async unreplicated(waits: Map<string, Promise<unknown>>): Promise<Set<string>> {
    const short = new Set<string>();
    for (const [key, wait] of waits) {
      try {
        if (Number(await wait) < this.opts.replicas.count) short.add(key);
      } catch {
        short.add(key);
      }
    }
    return short;
  }

  private onSuccess(): void {
    if (this.outage && this.pendingCount() === 0) {
      this.opts.logger.info(
        `ovstream: Redis reachable again; delivered ${this.deliveredInOutage} buffered turn event(s)` +
          (this.droppedInOutage > 0 ? `, ${this.droppedInOutage} were dropped while it was down` : ""),
      );
      this.outage = false;
      this.droppedInOutage = 0;
      this.retriesInOutage = 0;
    }
    if (!this.outage) {
      this.deliveredInOutage = 0;
    }
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
    if (!this.outage) {
      this.outage = true;
      this.deliveredInOutage = 0;
      this.opts.logger.warn(
        `ovstream: cannot publish turn events to Redis (${errorText(err)}); ` +
          `buffering ${this.pendingCount()} event(s) in memory` +
          (this.droppedInOutage > 0 ? ` (${this.droppedInOutage} oldest dropped beyond the cap)` : "") +
          `, retrying in ${delay} ms`,
      );
    } else {
      this.retriesInOutage += 1;
      const msg =
        `ovstream: Redis still unreachable (${errorText(err)}); ${this.pendingCount()} turn event(s) buffered, ` +
        `${this.droppedInOutage} dropped; next retry in ${delay} ms`;
      if (this.retriesInOutage % 10 === 0) {
        this.opts.logger.warn(msg);
      } else {
        this.opts.logger.debug?.(msg);
      }
    }
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.kick();
    }, delay);
    // The buffer must not keep a host that is shutting down alive.
    this.retryTimer.unref();
  }
}

/**
 * Error replies that say "not now" rather than "never": a full Redis (maxmemory with
 * noeviction), one still loading its data, a replica or a cluster mid-failover, or a
 * cluster node answering a client not configured for a cluster (MOVED/ASK: `redisCluster`
 * is off; the warning names the reply, and nothing is lost while the operator fixes it).
 * The event is kept and sent again; any other error reply (WRONGTYPE, say) drops it.
 */
const TRANSIENT_REPLIES = [
  "OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "MOVED", "ASK",
];

export function isTransient(reply: ErrorReply): boolean {
  const code = reply.message.split(" ", 1)[0] ?? "";
  return TRANSIENT_REPLIES.includes(code);
}
