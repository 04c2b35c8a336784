/**
 * Where the publisher sends a turn: the deployment's shard map as the service recorded it
 * (checked against the plugin's shard count), and the command that publishes an event by it.
 */

import type { RedisConnection } from "./connection.js";
import type { Pending } from "./event_buffer.js";
import { mappedStreamKey, PUBLISH_TURN_SCRIPT, shardOf, tagGenerationKey, type ShardMap } from "./keys.js";
import type { PluginLogger } from "./types.js";

/**
 * The shard map the service records under `deploymentKey` (null when there is none to read);
 * throws when its shard count is not the plugin's (nothing may be published then). A new
 * generation (a reshard) is said at INFO.
 */
export async function readShardMap(
  client: RedisConnection,
  shards: { count: number; deploymentKey: string },
  previous: ShardMap | null,
  logger: PluginLogger,
): Promise<ShardMap | null> {
  const { count, deploymentKey } = shards;
  if (!deploymentKey) return null;
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
  if (previous && previous.generation !== map.generation) {
    logger.info(
      `ovstream: the service's turn streams are now generation ${map.generation} (${map.streams} shards); publishing there`,
    );
  }
  return map;
}

/** The command publishing `item`: routed by the shard map when it names its session. */
export function publishCommand(
  prefix: string | undefined,
  map: ShardMap | null,
  item: Pending,
): { key: string; args: string[] } {
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
