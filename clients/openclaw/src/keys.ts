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

/**
 * The deployment's turn streams now (workers/store/shard_map.py): generation `generation` has
 * `streams` streams; a session's records keep the tag `sha mod tags` for life, and `streams`
 * is a multiple of `tags`, so a stream's sessions all share its tag.
 */
export interface ShardMap {
  tags: number;
  generation: number;
  streams: number;
}

/** The stream a session publishes to under `map` (Keys.stream of a StreamShard). */
export function mappedStreamKey(prefix: string, map: ShardMap, ovSessionId: string): string {
  const shard = shardOf(ovSessionId, map.streams);
  if (map.generation === 0) return streamKey(prefix, shard);
  return `${prefix}:{s${shard % map.tags}}:turns:g${map.generation}.${shard}`;
}

/** The generation whose streams take a tag's publishes (Keys.tag_generation). */
export function tagGenerationKey(prefix: string, tag: number): string {
  return `${prefix}:{s${tag}}:generation`;
}

/**
 * workers/store/scripts.py PUBLISH_TURN, the same text: XADD only when the publisher's
 * generation is the tag's (else `[0, generation]`: a reshard closed that stream).
 */
export const PUBLISH_TURN_SCRIPT = `
local gen = redis.call('GET', KEYS[1]) or '0'
if gen ~= ARGV[1] then return {0, gen} end
local id = redis.call('XADD', KEYS[2], '*', ARGV[2], ARGV[3])
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[5]) end
return {1, id}
`;

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
