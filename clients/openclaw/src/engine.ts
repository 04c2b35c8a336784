/**
 * The context engine OpenClaw calls.
 *
 * - afterTurn / commitTurn: build a TurnEvent and hand it to the publisher
 *   (Redis stream of the session's shard); they return once it is buffered.
 * - assemble: POST /v1/assemble with the session's own turns (those Redis
 *   has not taken, those published lately), so the service appends every turn
 *   its snapshot lacks exactly once, whatever the host passes as `messages`
 *   (so the main call sends their count, not the messages themselves);
 *   any failure or timeout passes the messages through unchanged with a local
 *   token estimate, so the agent keeps going.
 * - bootstrap: imports a transcript older than ovstream, once per session.
 * - compact: POST /v1/compact; a failure reports ok:false.
 * - prepareSubagentSpawn / onSubagentEnded: a child's lineage and its commit (subagents.ts);
 *   a forked child's assemble sends its messages and `forked`.
 * Bypassed sessions never leave the process.
 */

import { isBypassed, ovSessionId, resolveSessionKey } from "./ids.js";
import { RpcError } from "./rpc.js";
import { onSubagentEnded, prepareSubagentSpawn } from "./subagents.js";
import { turnFingerprint, type PluginRuntime } from "./runtime.js";
import { ENGINE_VERSION } from "./version.js";
import { estimateMessageTokens, estimateTokens } from "./tokens.js";
import type {
  AfterTurnParams,
  AgentMessage,
  AssembleParams,
  AssembleResult,
  BootstrapParams,
  BootstrapResult,
  CommitTurnParams,
  CommitTurnResult,
  CompactParams,
  CompactResult,
  ContextEngine,
  RuntimeContext,
  SubagentEndedParams,
  SubagentSpawnParams,
  SubagentSpawnPreparation,
} from "./types.js";

export const ENGINE_ID = "ovstream";
export const ENGINE_NAME = "ovstream (OpenViking context engine)";
export { ENGINE_VERSION };

/** runtimeContext reduced to JSON primitives: it also carries functions (llm, rewriteTranscriptEntries). */
export function plainRuntimeContext(ctx: RuntimeContext | undefined): Record<string, string | number | boolean | null> | undefined {
  if (!ctx || typeof ctx !== "object") {
    return undefined;
  }
  const out: Record<string, string | number | boolean | null> = {};
  for (const [k, v] of Object.entries(ctx)) {
    if (v === null || typeof v === "string" || typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v))) {
      out[k] = v;
    }
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

function has(obj: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}

function passthrough(messages: AgentMessage[]): AssembleResult {
  return { messages, estimatedTokens: estimateMessageTokens(messages) };
}

function finitePositive(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? value : undefined;
}

function agentIdOf(...candidates: unknown[]): string | undefined {
  for (const c of candidates) {
    if (typeof c === "string" && c.trim()) {
      return c;
    }
  }
  return undefined;
}

/** Pages of the host's visible transcript, read through its SDK (the contract's cursor API). */
const TRANSCRIPT_MAX_PAGES = 100;

export async function readTranscript(identity: { agentId?: string; sessionKey?: string; sessionId: string }): Promise<AgentMessage[] | undefined> {
  type Page = { kind: string; cursor?: string; hasMore?: boolean; entries?: Array<{ message?: AgentMessage }> };
  type Sdk = { readSessionTranscriptVisibleMessageDelta?: (p: Record<string, unknown>) => Promise<Page> };
  let sdk: Sdk;
  try {
    // Resolved by the host at run time; absent outside OpenClaw (then nothing is imported).
    sdk = (await import("openclaw/plugin-sdk/session-transcript-runtime" as string)) as Sdk;
  } catch {
    return undefined;
  }
  const read = sdk.readSessionTranscriptVisibleMessageDelta;
  if (typeof read !== "function") return undefined;
  const messages: AgentMessage[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < TRANSCRIPT_MAX_PAGES; page++) {
    const res = await read({ ...identity, ...(cursor ? { cursor } : {}) });
    if (res.kind !== "page") return page === 0 && res.kind === "missing" ? [] : undefined;
    for (const entry of res.entries ?? []) {
      if (entry.message && typeof entry.message === "object") messages.push(entry.message);
    }
    if (!res.hasMore || !res.cursor) return messages;
    cursor = res.cursor;
  }
  return messages;
}

function describeError(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function createEngine(rt: PluginRuntime): ContextEngine {
  const cfg = rt.config;
  const bypassed = (sessionId: string | undefined, sessionKey: string | undefined) =>
    isBypassed(cfg.bypassSessionPatterns, sessionId, sessionKey);

  return {
    info: {
      id: ENGINE_ID,
      name: ENGINE_NAME,
      version: ENGINE_VERSION,
      ownsCompaction: true,
      // Assemble builds on the messages OpenClaw hands it (the transcript
      // before the current turn) and commitTurn is idempotent per
      // advancementKey, which newer hosts require of a non-legacy engine.
      transcriptSemantics: {
        currentTurnFence: "before-current-turn-entry-v1",
        turnAdvancementIdempotency: "atomic-idempotent-v1",
      },
    },

    async ingest() {
      return { ingested: false };
    },

    async ingestBatch() {
      return { ingestedCount: 0 };
    },

    async afterTurn(params: AfterTurnParams): Promise<void> {
      try {
        if (!cfg.autoCapture) return;
        const sessionKey = resolveSessionKey(params);
        if (bypassed(params.sessionId, sessionKey)) return;
        if (rt.durableTurns) {
          // This host advances turns through commitTurn; capturing here too
          // would write every turn twice.
          return;
        }
        const messages = Array.isArray(params.messages) ? params.messages : [];
        const pre = typeof params.prePromptMessageCount === "number" && params.prePromptMessageCount > 0
          ? Math.floor(params.prePromptMessageCount)
          : 0;
        const published = rt.publishTurn({
          sessionId: params.sessionId,
          sessionKey,
          agentId: agentIdOf(params.runtimeContext?.agentId),
          messages,
          prePromptMessageCount: pre,
          isHeartbeat: params.isHeartbeat === true,
          tokenBudget: params.tokenBudget ?? params.runtimeContext?.tokenBudget,
        });
        if (published) {
          rt.turnFingerprints.add(turnFingerprint(params.sessionId, messages.slice(pre)));
        }
      } catch (err) {
        // afterTurn must never fail the host's turn.
        rt.logger.warn(`ovstream: afterTurn: ${describeError(err)}`);
      }
    },

    async commitTurn(params: CommitTurnParams): Promise<CommitTurnResult> {
      rt.durableTurns = true;
      try {
        if (!cfg.autoCapture) return { status: "committed" };
        const sessionKey = resolveSessionKey({
          sessionKey: params.sessionKey ?? params.admission?.sessionKey,
          runtimeContext: params.runtimeContext,
        });
        if (bypassed(params.sessionId, sessionKey)) return { status: "committed" };
        const key = params.advancementKey;
        if (typeof key === "string" && key && rt.advancementKeys.has(key)) {
          return { status: "duplicate" };
        }
        const messages = Array.isArray(params.messages) ? params.messages : [];
        if (rt.turnFingerprints.has(turnFingerprint(params.sessionId, messages))) {
          // afterTurn already published this very turn (a host calling both).
          if (key) rt.advancementKeys.add(key);
          return { status: "committed" };
        }
        const published = rt.publishTurn({
          sessionId: params.sessionId,
          sessionKey,
          agentId: agentIdOf(params.admission?.agentId, params.runtimeContext?.agentId),
          messages,
          prePromptMessageCount: 0,
          isHeartbeat: params.isHeartbeat === true,
          tokenBudget: params.runtimeContext?.tokenBudget,
          advancementKey: key,
        });
        if (published && key) rt.advancementKeys.add(key);
        return { status: "committed" };
      } catch (err) {
        rt.logger.warn(`ovstream: commitTurn: ${describeError(err)}`);
        return { status: "committed" };
      }
    },

    async assemble(params: AssembleParams): Promise<AssembleResult> {
      const messages = Array.isArray(params.messages) ? params.messages : [];
      const sessionKey = resolveSessionKey(params);
      if (bypassed(params.sessionId, sessionKey)) {
        return passthrough(messages);
      }
      // OpenClaw's main assemble carries prompt / availableTools /
      // citationsMode; its per-LLM-call transform-context call has none of
      // them and only does auto-recall.
      const isMain = has(params, "prompt") || has(params, "availableTools") || has(params, "citationsMode");
      if (!isMain && !cfg.autoRecall) {
        return passthrough(messages);
      }
      const body: Record<string, unknown> = { sessionId: params.sessionId };
      if (sessionKey) body.sessionKey = sessionKey;
      const tokenBudget = finitePositive(params.tokenBudget);
      if (tokenBudget !== undefined) body.tokenBudget = tokenBudget;
      const runtimeContext = plainRuntimeContext(params.runtimeContext);
      if (runtimeContext) body.runtimeContext = runtimeContext;
      if (typeof params.model === "string") body.model = params.model;
      // Keys are forwarded whenever present (even undefined: null), since
      // their presence is what marks the main call.
      if (has(params, "prompt")) body.prompt = typeof params.prompt === "string" ? params.prompt : null;
      if (has(params, "availableTools")) {
        const tools = params.availableTools;
        body.availableTools = tools instanceof Set ? [...tools] : Array.isArray(tools) ? tools : null;
      }
      if (has(params, "citationsMode")) body.citationsMode = params.citationsMode ?? null;
      // A forked subagent's context starts from its parent's (the service's core.fork): the
      // service reads its transcript, the parent's copy and its own turns, by count.
      const forked = sessionKey !== undefined && rt.forkedChildren.has(sessionKey);
      if (forked) body.forked = true;
      if (cfg.autoCapture && !forked) {
        try {
          const turns = rt.turnsFor(ovSessionId(params.sessionId, sessionKey));
          body.heldTurns = turns.held;
          body.recentTurns = turns.recent;
        } catch {
          // no usable session id: the service answers 400 and we pass through
        }
      }
      // With our turns sent, the main call's answer comes from the snapshot and those
      // turns: the host's transcript (often 100s of KiB) is sent as its count only.
      const counted = isMain && body.recentTurns !== undefined;
      if (counted) body.messageCount = messages.length;
      else body.messages = messages;
      try {
        const res = await rt.rpc.post<Partial<AssembleResult>>("/v1/assemble", body, { timeoutMs: cfg.rpcTimeoutMs });
        if (!res || !Array.isArray(res.messages) || typeof res.estimatedTokens !== "number") {
          throw new RpcError("invalid", "assemble answer lacks messages/estimatedTokens");
        }
        rt.assembleLog.ok();
        const addition = typeof res.systemPromptAddition === "string" ? res.systemPromptAddition : "";
        // No messages for a counted transcript: the service passes it through (with
        // the turn's recall block, if any), so the host's own messages go back.
        const out: AssembleResult =
          counted && res.messages.length === 0
            ? { messages, estimatedTokens: estimateMessageTokens(messages) + estimateTokens(addition) }
            : { messages: res.messages, estimatedTokens: res.estimatedTokens };
        if (addition) out.systemPromptAddition = addition;
        return out;
      } catch (err) {
        rt.assembleLog.failed(describeError(err));
        return passthrough(messages);
      }
    },

    async compact(params: CompactParams): Promise<CompactResult> {
      const sessionKey = resolveSessionKey(params);
      if (bypassed(params.sessionId, sessionKey)) {
        return { ok: true, compacted: false, reason: "session_bypassed" };
      }
      const body: Record<string, unknown> = { sessionId: params.sessionId };
      if (sessionKey) body.sessionKey = sessionKey;
      const tokenBudget = finitePositive(params.tokenBudget);
      if (tokenBudget !== undefined) body.tokenBudget = tokenBudget;
      const current = params.currentTokenCount;
      if (typeof current === "number" && Number.isFinite(current) && current >= 0) body.currentTokenCount = current;
      if (typeof params.force === "boolean") body.force = params.force;
      const runtimeContext = plainRuntimeContext(params.runtimeContext);
      if (runtimeContext) body.runtimeContext = runtimeContext;
      try {
        const res = await rt.rpc.post<CompactResult>("/v1/compact", body, {
          timeoutMs: cfg.compactTimeoutMs,
          signal: params.abortSignal,
        });
        if (!res || typeof res.ok !== "boolean" || typeof res.compacted !== "boolean") {
          throw new RpcError("invalid", "compact answer lacks ok/compacted");
        }
        rt.compactLog.ok();
        return res;
      } catch (err) {
        if (err instanceof RpcError && err.kind === "aborted") {
          // The host aborted (run abort or its own safety timeout): reject promptly.
          throw err;
        }
        rt.compactLog.failed(describeError(err));
        // a quota's 429 (the service's tenantQuotas) says so: the host may try again later
        const reason =
          err instanceof RpcError && err.kind === "timeout"
            ? "rpc_timeout"
            : err instanceof RpcError && err.status === 429
              ? "quota_exceeded"
              : "rpc_error";
        return { ok: false, compacted: false, reason };
      }
    },

    async bootstrap(params: BootstrapParams): Promise<BootstrapResult> {
      try {
        if (!cfg.autoCapture) return { bootstrapped: false, reason: "autoCapture off" };
        const sessionKey = resolveSessionKey(params);
        if (bypassed(params.sessionId, sessionKey)) return { bootstrapped: false, reason: "session_bypassed" };
        const ovSid = ovSessionId(params.sessionId, sessionKey);
        if (rt.importDone(ovSid)) return { bootstrapped: false, reason: "imported before" };
        if (sessionKey !== undefined && rt.forkedChildren.has(sessionKey)) {
          // its transcript is its parent's copy: the parent's OV session holds it already
          rt.markImported(ovSid);
          return { bootstrapped: false, reason: "a forked subagent: its transcript is its parent's" };
        }
        if (rt.publishedSessions.has(ovSid)) {
          // The host bootstraps on a session's second turn: its transcript is the turn we sent.
          rt.markImported(ovSid);
          return { bootstrapped: false, reason: "turns captured since the session began" };
        }
        const agentId = agentIdOf(params.sessionTarget?.agentId, params.runtimeContext?.agentId);
        const messages = await readTranscript({ agentId, sessionKey, sessionId: params.sessionId });
        if (messages === undefined) return { bootstrapped: false, reason: "transcript unreadable" };
        if (messages.length > 0) {
          // One id per session: a second import (another gateway, a lost marker) is the
          // same event to capture, and capture writes an import only into a new session.
          rt.publishTurn({
            sessionId: params.sessionId,
            sessionKey,
            agentId,
            messages,
            importTranscript: true,
            eventId: `import-${ovSid}`,
          });
          rt.logger.info(`ovstream: importing ${messages.length} earlier message(s) of session ${params.sessionId}`);
        }
        rt.markImported(ovSid);
        return { bootstrapped: true, importedMessages: messages.length };
      } catch (err) {
        rt.logger.warn(`ovstream: bootstrap: ${describeError(err)}`);
        return { bootstrapped: false, reason: describeError(err) };
      }
    },

    async prepareSubagentSpawn(params: SubagentSpawnParams): Promise<SubagentSpawnPreparation | undefined> {
      try {
        return await prepareSubagentSpawn(rt, params);
      } catch (err) {
        rt.logger.warn(`ovstream: prepareSubagentSpawn: ${describeError(err)}`);
        return undefined;
      }
    },

    async onSubagentEnded(params: SubagentEndedParams): Promise<void> {
      try {
        await onSubagentEnded(rt, params);
      } catch (err) {
        rt.logger.warn(`ovstream: onSubagentEnded: ${describeError(err)}`);
      }
    },

    async dispose(): Promise<void> {
      // Shared resources (the turn buffer above all) belong to the plugin and
      // are closed by its service's stop(), not per engine instance.
    },
  };
}
