/**
 * Redis stream names, as core/keys.py defines them.
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
