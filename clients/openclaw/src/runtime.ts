/**
 * What every engine instance and tool of one plugin registration shares: the
 * config, the turn publisher, the RPC client and the capture bookkeeping.
 *
 * OpenClaw may build (and dispose) a context engine per logical turn, so
 * nothing that must outlive a turn — above all the buffer of unpublished
 * turn events — lives in the engine object itself.
 */

import { createHash } from "node:crypto";

import type { PluginConfig } from "./config.js";
import { buildTurnEvent, encodeTurnEvent, type TurnInput } from "./events.js";
import { ovSessionId } from "./ids.js";
import { shardOf, streamKey } from "./keys.js";
import { TurnPublisher, type PublisherOptions } from "./publisher.js";
import { RpcClient } from "./rpc.js";
import type { AgentMessage, PluginLogger } from "./types.js";

/** A bounded set remembering the most recent keys (insertion order). */
export class RecentSet {
  private readonly items = new Set<string>();
  constructor(private readonly capacity: number) {}
  has(key: string): boolean {
    return this.items.has(key);
  }
  add(key: string): void {
    this.items.delete(key);
    this.items.add(key);
    while (this.items.size > this.capacity) {
      const oldest = this.items.values().next().value;
      if (oldest === undefined) break;
      this.items.delete(oldest);
    }
  }
}

/** Logs the first failure of a streak as a warning and the recovery as info. */
export class FailureLog {
  private failing = false;
  constructor(
    private readonly logger: PluginLogger,
    private readonly what: string,
  ) {}
  failed(detail: string): void {
    if (!this.failing) {
      this.failing = true;
      this.logger.warn(`ovstream: ${this.what} failed (${detail}); passing through until the RPC answers again`);
    } else {
      this.logger.debug?.(`ovstream: ${this.what} failed again (${detail})`);
    }
  }
  ok(): void {
    if (this.failing) {
      this.failing = false;
      this.logger.info(`ovstream: ${this.what} answers again`);
    }
  }
}

export interface RuntimeOptions {
  /** Overrides for the publisher (tests: short backoff). */
  publisher?: Partial<PublisherOptions>;
  fetchImpl?: typeof fetch;
}

export class PluginRuntime {
  readonly publisher: TurnPublisher;
  readonly rpc: RpcClient;
  /** Set once the host has called commitTurn: it is a durable-turn host. */
  durableTurns = false;
  /** advancementKeys already enqueued. */
  readonly advancementKeys = new RecentSet(4096);
  /** Fingerprints of turns published by afterTurn (for the commitTurn overlap). */
  readonly turnFingerprints = new RecentSet(1024);
  readonly assembleLog: FailureLog;
  readonly compactLog: FailureLog;

  constructor(
    readonly config: PluginConfig,
    readonly logger: PluginLogger,
    options: RuntimeOptions = {},
  ) {
    this.publisher = new TurnPublisher({
      redisUrl: config.redisUrl,
      logger,
      maxLen: config.streamMaxLen,
      maxEvents: config.bufferMaxEvents,
      maxBytes: config.bufferMaxBytes,
      ...options.publisher,
    });
    this.rpc = new RpcClient({ baseUrl: config.rpcUrl, apiKey: config.apiKey, fetchImpl: options.fetchImpl });
    this.assembleLog = new FailureLog(logger, "assemble RPC");
    this.compactLog = new FailureLog(logger, "compact RPC");
  }

  /**
   * Encode and buffer one turn event on its session's shard. Synchronous:
   * returns once the event is in the buffer. False when it could not be
   * built (no usable session id, unserialisable message) — logged.
   */
  publishTurn(input: TurnInput): boolean {
    let ovSid: string;
    try {
      ovSid = ovSessionId(input.sessionId, input.sessionKey);
    } catch (err) {
      this.logger.warn(`ovstream: turn not published: ${(err as Error).message}`);
      return false;
    }
    const event = buildTurnEvent({ ...input, user: input.user ?? this.config.user ?? null });
    let payload: string;
    try {
      payload = encodeTurnEvent(event);
    } catch (err) {
      this.logger.warn(`ovstream: turn of session ${input.sessionId} not published: ${(err as Error).message}`);
      return false;
    }
    const key = streamKey(this.config.keyPrefix, shardOf(ovSid, this.config.shards));
    this.publisher.enqueue(key, payload);
    return true;
  }

  async close(timeoutMs = 2000): Promise<void> {
    await this.publisher.close(timeoutMs);
  }
}

/** Identity of one turn's own messages, the same for afterTurn and commitTurn. */
export function turnFingerprint(sessionId: string, turnMessages: readonly AgentMessage[]): string {
  let json: string;
  try {
    json = JSON.stringify(turnMessages);
  } catch {
    json = String(turnMessages.length);
  }
  return createHash("sha256").update(sessionId).update("\n").update(json).digest("hex");
}
