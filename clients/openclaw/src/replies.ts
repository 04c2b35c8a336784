/**
 * What Redis's replies to the publisher mean: an error said in one line, an error reply that
 * says "not now" rather than "never", and the replicas a batch's streams reached (WAIT).
 */

import type { ErrorReply } from "redis";

import type { RedisConnection } from "./connection.js";

export function errorText(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) {
    return errorText(err.errors[0]);
  }
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    return code && !err.message.includes(code) ? `${code}: ${err.message}` : err.message || err.name;
  }
  return String(err);
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

/** After a batch's writes: one `WAIT count timeoutMs` per stream (so per node), by stream. */
export function replicaWaits(
  client: RedisConnection,
  streams: string[],
  count: number,
  timeoutMs: number,
): Map<string, Promise<unknown>> {
  const waits = new Map<string, Promise<unknown>>();
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

/** The streams whose WAIT counted fewer than `count` replicas (or failed). */
export async function unreplicated(waits: Map<string, Promise<unknown>>, count: number): Promise<Set<string>> {
  const short = new Set<string>();
  for (const [key, wait] of waits) {
    try {
      if (Number(await wait) < count) short.add(key);
    } catch {
      short.add(key);
    }
  }
  return short;
}
