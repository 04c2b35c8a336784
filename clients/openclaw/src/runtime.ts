/**
 * What every engine instance and tool of one plugin registration shares: the
 * config, the turn publisher, the RPC client and the capture bookkeeping.
 *
 * OpenClaw may build (and dispose) a context engine per logical turn, so
 * nothing that must outlive a turn — above all the buffer of unpublished
 * turn events — lives in the engine object itself.
 */

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import type { PluginConfig } from "./config.js";
import { buildTurnEvent, encodeTurnEvent, type TurnEvent, type TurnInput } from "./events.js";
import { isBypassed, ovSessionId } from "./ids.js";
import { deploymentKey, LAST_TURN_TTL_S, lastTurnKey, shardOf, streamKey } from "./keys.js";
import { TurnPublisher, type PublisherOptions } from "./publisher.js";
import { TurnRedactor } from "./redaction.js";
import { RpcClient } from "./rpc.js";
import type { AgentMessage, PluginLogger } from "./types.js";

/** A bounded set remembering the most recent keys (insertion order). */
export class RecentSet {
  private readonly items = new Set<string>();
  constructor(private readonly capacity: number) {}
  has(key: string): boolean {
    return this.items.has(key);
  }
  delete(key: string): void {
    this.items.delete(key);
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

/** A map keeping its `capacity` most recently set keys. */
export class RecentMap<V> {
  private readonly items = new Map<string, V>();
  constructor(private readonly capacity: number) {}
  get(key: string): V | undefined {
    return this.items.get(key);
  }
  set(key: string, value: V): void {
    this.items.delete(key);
    this.items.set(key, value);
    while (this.items.size > this.capacity) {
      const oldest = this.items.keys().next().value;
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

/** OpenClaw's state directory, as the host resolves it (OPENCLAW_STATE_DIR, else OPENCLAW_HOME/.openclaw). */
export function openclawStateDir(env: NodeJS.ProcessEnv = process.env): string {
  const blank = (v: string | undefined) => !v || !v.trim() || ["undefined", "null"].includes(v.trim());
  if (!blank(env.OPENCLAW_STATE_DIR)) return env.OPENCLAW_STATE_DIR!.trim();
  const home = blank(env.OPENCLAW_HOME) ? homedir() : env.OPENCLAW_HOME!.trim();
  return join(home, ".openclaw");
}

/** Where ovstream keeps its files: `config.stateDir`, else `<OpenClaw state dir>/ovstream`. */
export function pluginStateDir(config: PluginConfig): string {
  return config.stateDir ?? join(openclawStateDir(), "ovstream");
}

/**
 * The runtimes open in this process. Process-wide, not per module: the host may load the
 * plugin's modules more than once in one process (2026.9.6's CLI does), and a one-shot
 * command must close every runtime (closeOpenRuntimes), whichever copy made it.
 */
const processWide = ((globalThis as Record<symbol, unknown>)[Symbol.for("ovstream.runtimes")] ??= {
  open: new Set<PluginRuntime>(),
  exitHook: false,
}) as { open: Set<PluginRuntime>; exitHook: boolean };
const openRuntimes = processWide.open;

/** Runtimes still open when the process exits say what became of their buffered turns. */
function reportAtExit(): void {
  for (const rt of openRuntimes) {
    const { pending } = rt.publisher.getStats();
    if (pending > 0) {
      rt.logger.warn(
        `ovstream: exiting with ${pending} turn event(s) Redis has not taken; they are kept in ` +
          `${join(rt.stateDir, "spool")} and the next run delivers them`,
      );
    }
  }
}

/** Turns published recently are sent with assemble until the snapshot reflects them. */
export const RECENT_TURNS_PER_SESSION = 16;
export const RECENT_TURNS_MAX_AGE_MS = 15 * 60_000;

interface Recent {
  payload: string;
  at: number;
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
  readonly stateDir: string;
  /** Per OV session: the turns this process published lately (assemble's overlay). */
  private readonly recent = new Map<string, Recent[]>();
  /** OV sessions this process published a turn of: capture knows them, so an import of their
   * transcript would only repeat turns (capture skips it; with Redis away assemble would not). */
  readonly publishedSessions = new RecentSet(4096);
  /** sessionKey -> the session's id and agent, as its turns were published (a subagent's end names only its key). */
  readonly sessionsByKey = new RecentMap<{ sessionId: string; agentId?: string }>(4096);
  /** Session keys of subagents forked from their parent (prepareSubagentSpawn): their context starts from the parent's. */
  readonly forkedChildren = new RecentSet(4096);
  /** OV sessions a commit marker went out for lately (before_reset and session_end both fire). */
  private readonly ended = new RecentSet(1024);
  /** Secrets masked in each turn before it is published (src/redaction.ts). */
  private readonly redactor: TurnRedactor;

  constructor(
    readonly config: PluginConfig,
    readonly logger: PluginLogger,
    options: RuntimeOptions = {},
  ) {
    this.stateDir = pluginStateDir(config);
    this.redactor = new TurnRedactor(config);
    this.publisher = new TurnPublisher({
      redisUrl: config.redisUrl,
      redisCluster: config.redisCluster,
      sentinels: { addresses: config.redisSentinels, masterName: config.redisMasterName },
      replicas: { count: config.publishReplicas, timeoutMs: config.publishReplicasTimeoutMs },
      shards: { count: config.shards, deploymentKey: deploymentKey(config.keyPrefix), keyPrefix: config.keyPrefix },
      logger,
      maxEvents: config.bufferMaxEvents,
      maxBytes: config.bufferMaxBytes,
      spoolDir: join(this.stateDir, "spool"),
      tls: { caFile: config.redisCaFile, certFile: config.redisCertFile, keyFile: config.redisKeyFile },
      ...options.publisher,
    });
    this.rpc = new RpcClient({
      baseUrl: config.rpcUrl,
      apiKey: config.apiKey,
      token: config.rpcToken,
      fetchImpl: options.fetchImpl,
    });
    openRuntimes.add(this);
    if (!processWide.exitHook) {
      processWide.exitHook = true;
      process.once("exit", reportAtExit);
    }
    this.assembleLog = new FailureLog(logger, "assemble RPC");
    this.compactLog = new FailureLog(logger, "compact RPC");
  }

  /**
   * Encode and buffer one turn event on its session's shard. Synchronous:
   * returns once the event is in the buffer. False when it could not be
   * built (no usable session id, unserialisable message) — logged.
   * `remember: false` keeps the payload out of assemble's overlay (`turnsFor`):
   * the history import sends whole transcripts from a process that never assembles.
   */
  publishTurn(input: TurnInput, { remember = true }: { remember?: boolean } = {}): boolean {
    let ovSid: string;
    try {
      ovSid = ovSessionId(input.sessionId, input.sessionKey);
    } catch (err) {
      this.logger.warn(`ovstream: turn not published: ${(err as Error).message}`);
      return false;
    }
    const event = buildTurnEvent({ ...input, user: input.user ?? this.config.user ?? null });
    event.messages = this.redactor.redact(ovSid, event.agent_id, event.messages)[0]; // before it leaves this host
    let payload: string;
    try {
      payload = encodeTurnEvent(event);
    } catch (err) {
      this.logger.warn(`ovstream: turn of session ${input.sessionId} not published: ${(err as Error).message}`);
      return false;
    }
    const shard = shardOf(ovSid, this.config.shards);
    const isTurn = event.messages.length > 0 && event.commit === null;
    const lastTurn = isTurn
      ? { key: lastTurnKey(this.config.keyPrefix, shard, ovSid), eventId: event.event_id, ttlS: LAST_TURN_TTL_S }
      : undefined;
    this.publisher.enqueue(streamKey(this.config.keyPrefix, shard), payload, { session: ovSid, lastTurn });
    if (isTurn && remember) this.remember(ovSid, payload);
    if (isTurn && input.sessionKey) {
      const agentId = typeof input.agentId === "string" ? input.agentId : undefined;
      this.sessionsByKey.set(input.sessionKey, { sessionId: input.sessionId, agentId });
    }
    if (isTurn && !event.import_transcript) this.publishedSessions.add(ovSid);
    return true;
  }

  private remember(ovSid: string, payload: string): void {
    const list = this.recent.get(ovSid) ?? [];
    list.push({ payload, at: Date.now() });
    if (list.length > RECENT_TURNS_PER_SESSION) list.splice(0, list.length - RECENT_TURNS_PER_SESSION);
    this.recent.delete(ovSid); // re-insert: the map stays in least-recently-used order
    this.recent.set(ovSid, list);
    if (this.recent.size > 4096) {
      const oldest = this.recent.keys().next().value;
      if (oldest !== undefined) this.recent.delete(oldest);
    }
  }

  /**
   * The session's turns for assemble's overlay: `held`, those Redis has not
   * taken yet (certainly not in OV); `recent`, those published lately. The
   * service appends each one its snapshot does not reflect, once.
   */
  turnsFor(ovSid: string): { held: TurnEvent[]; recent: TurnEvent[] } {
    const heldPayloads = this.publisher.pendingFor(ovSid);
    const heldSet = new Set(heldPayloads);
    const cutoff = Date.now() - RECENT_TURNS_MAX_AGE_MS;
    const recent = (this.recent.get(ovSid) ?? []).filter((r) => r.at >= cutoff && !heldSet.has(r.payload));
    const parse = (p: string) => JSON.parse(p) as TurnEvent;
    return { held: heldPayloads.map(parse), recent: recent.map((r) => parse(r.payload)) };
  }

  /**
   * The conversation ended (reset, /new, idle, deleted): publish a commit
   * marker after its turns, so capture commits the session once they are all
   * in OV. One marker per session, though several hooks report the same end.
   */
  endSession(params: { sessionId?: string; sessionKey?: string; agentId?: string }, reason: string): boolean {
    if (!this.config.autoCapture || !params.sessionId) return false;
    // bypassed sessions never leave the process: nothing of them was captured, nothing to commit
    if (isBypassed(this.config.bypassSessionPatterns, params.sessionId, params.sessionKey)) return false;
    let ovSid: string;
    try {
      ovSid = ovSessionId(params.sessionId, params.sessionKey);
    } catch {
      return false;
    }
    if (this.ended.has(ovSid)) return false;
    this.ended.add(ovSid);
    const published = this.publishTurn({
      sessionId: params.sessionId,
      sessionKey: params.sessionKey,
      agentId: params.agentId,
      messages: [],
      commit: "session_end",
    });
    if (published) this.logger.info(`ovstream: session ${params.sessionId} ended (${reason}); commit requested after its turns`);
    return published;
  }

  /** Whether this session's earlier transcript was imported (or found empty) before. */
  importDone(ovSid: string): boolean {
    return existsSync(join(this.stateDir, "imported", importMarker(ovSid)));
  }

  markImported(ovSid: string): void {
    try {
      const dir = join(this.stateDir, "imported");
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, importMarker(ovSid)), "");
    } catch (err) {
      this.logger.debug?.(`ovstream: import marker not written: ${(err as Error).message}`);
    }
  }

  /** Closes the publisher (see TurnPublisher.close); returns the events it left. */
  async close(timeoutMs = 2000): Promise<string[]> {
    openRuntimes.delete(this);
    return this.publisher.close(timeoutMs);
  }
}

/**
 * Closes every runtime of this process, side by side; returns how many events Redis did
 * not take (each spooled event once, though runtimes sharing a spool both loaded it).
 * A one-shot command ends with this: the host registers a plugin more than once in its CLI
 * (2026.9.6: twice for `openclaw ovstream import`), each registration is a runtime, and a
 * runtime delivering an earlier run's spool holds a Redis connection that keeps the process
 * from exiting.
 */
export async function closeOpenRuntimes(timeoutMs: number): Promise<number> {
  const left = (await Promise.all([...openRuntimes].map((rt) => rt.close(timeoutMs)))).flat();
  const spooled = new Set(left.filter((file) => file));
  return spooled.size + left.filter((file) => !file).length;
}

function importMarker(ovSid: string): string {
  return createHash("sha256").update(ovSid).digest("hex").slice(0, 32);
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
