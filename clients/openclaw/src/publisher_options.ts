/** What a TurnPublisher (publisher.ts) is given, and what it tells of itself. */

import type { RedisTlsFiles } from "./connection.js";
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

export interface PublisherStats {
  pending: number;
  pendingBytes: number;
  delivered: number;
  dropped: number;
  failures: number;
  connected: boolean;
}
