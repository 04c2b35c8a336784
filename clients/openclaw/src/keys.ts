/**
 * Redis key names the plugin writes, as workers/store/keys.py defines them.
 *
 * A session's turns always go to one shard: the first 4 bytes of
 * sha256(ov_session_id), big-endian, mod the shard count. The stream key
 * carries the shard as a Redis Cluster hash tag: `<prefix>:{s<shard>}:turns`.
 */

import { createHash } from "node:crypto";

export function shardOf(ovSessionId: string, shards: number): number {
  if (!Number.isInteger(shards) || shards < 1) {
    throw new RangeError(`shards must be a positive integer, got ${shards}`);
  }
  const digest = createHash("sha256").update(ovSessionId, "utf8").digest();
  return digest.readUInt32BE(0) % shards;
}

export function streamKey(prefix: string, shard: number): string {
  return `${prefix}:{s${shard}}:turns`;
}

/** The event_id of the session's newest published turn (workers/store/keys.py Keys.last_turn). */
export function lastTurnKey(prefix: string, shard: number, ovSessionId: string): string {
  return `${prefix}:{s${shard}}:last-turn:${ovSessionId}`;
}

/**
 * Hash of what every process of the deployment must agree on; `shards` is recorded by the
 * service's first process (workers/store/deployment.py, Keys.deployment).
 */
export function deploymentKey(prefix: string): string {
  return `${prefix}:deployment`;
}

/** How long that marker is kept (core/defaults.py LAST_TURN_TTL_S). */
export const LAST_TURN_TTL_S = 7 * 24 * 3600;
