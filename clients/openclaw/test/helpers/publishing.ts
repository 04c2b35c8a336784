/** What the publisher's tests share: the stream they publish to, a publisher with quick retries, and a
 * read of a stream's events. */
import { createClient } from "redis";

import { TurnPublisher } from "../../src/publisher.js";
import type { MemoryLogger } from "./fakes.js";

export const KEY = "t:{s0}:turns";

export async function readStream(url: string, key = KEY): Promise<string[]> {
  const client = createClient({ url });
  client.on("error", () => {});
  await client.connect();
  try {
    const entries = await client.xRange(key, "-", "+");
    return entries.map((e) => String(e.message.e));
  } finally {
    await client.close();
  }
}

export function publisher(url: string, logger: MemoryLogger, extra: Partial<ConstructorParameters<typeof TurnPublisher>[0]> = {}) {
  return new TurnPublisher({
    redisUrl: url,
    logger,
    maxEvents: 1000,
    maxBytes: 1 << 20,
    initialBackoffMs: 20,
    maxBackoffMs: 200,
    ...extra,
  });
}
