/**
 * Subagents: the host's `prepareSubagentSpawn` and `onSubagentEnded`.
 *
 * Prepare tells the service a child is about to start (`POST /v1/subagents/prepare`): it
 * records the child's parent and context mode, and for a fork the parent's snapshot, the
 * start of the child's context; the plugin remembers a forked child so that its assemble
 * asks for that context (`forked`) and its transcript (the parent's copy) is never imported
 * into the child's OV session. The rollback handle forgets the spawn when it failed.
 *
 * A child's run ending is not a session ending, so the host fires no session_end for it:
 * here its commit marker goes on the stream behind its turns (as `/reset` does), so that
 * its conversation is committed and what it found becomes memories of the agent it ran as.
 * Neither hook ever fails the spawn: a service away costs the fork its parent's context and
 * the lineage record, never the child's run.
 */

import { isBypassed } from "./ids.js";
import type { PluginRuntime } from "./runtime.js";
import type { SubagentEndedParams, SubagentSpawnParams, SubagentSpawnPreparation } from "./types.js";

function describeError(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export async function prepareSubagentSpawn(
  rt: PluginRuntime,
  params: SubagentSpawnParams,
): Promise<SubagentSpawnPreparation | undefined> {
  const cfg = rt.config;
  if (isBypassed(cfg.bypassSessionPatterns, params.childSessionId, params.childSessionKey)) return undefined;
  const mode = params.contextMode === "fork" ? "fork" : "isolated";
  if (params.childSessionId) rt.sessionsByKey.set(params.childSessionKey, { sessionId: params.childSessionId });
  if (mode === "fork") rt.forkedChildren.add(params.childSessionKey);
  const child = { childSessionKey: params.childSessionKey, childSessionId: params.childSessionId };
  // The host may leave the parent's id out (a nested spawn, say): the one its turns went
  // under names its OV session, whose snapshot a fork starts from.
  const parentSessionId = params.parentSessionId ?? rt.sessionsByKey.get(params.parentSessionKey)?.sessionId;
  try {
    await rt.rpc.post(
      "/v1/subagents/prepare",
      {
        parentSessionKey: params.parentSessionKey,
        childSessionKey: params.childSessionKey,
        contextMode: mode,
        parentSessionId,
        childSessionId: params.childSessionId,
      },
      { timeoutMs: cfg.rpcTimeoutMs },
    );
  } catch (err) {
    rt.logger.warn(`ovstream: subagent ${params.childSessionKey} (${mode}) not recorded: ${describeError(err)}`);
  }
  return {
    rollback: async () => {
      rt.forkedChildren.delete(params.childSessionKey);
      try {
        await rt.rpc.post("/v1/subagents/rollback", child, { timeoutMs: cfg.rpcTimeoutMs });
      } catch (err) {
        rt.logger.warn(`ovstream: subagent ${params.childSessionKey}: rollback not recorded: ${describeError(err)}`);
      }
    },
  };
}

export async function onSubagentEnded(rt: PluginRuntime, params: SubagentEndedParams): Promise<void> {
  const known = rt.sessionsByKey.get(params.childSessionKey);
  rt.forkedChildren.delete(params.childSessionKey);
  if (known) {
    rt.endSession({ sessionId: known.sessionId, sessionKey: params.childSessionKey, agentId: known.agentId }, `subagent ${params.reason}`);
  }
  try {
    await rt.rpc.post(
      "/v1/subagents/ended",
      { childSessionKey: params.childSessionKey, childSessionId: known?.sessionId, reason: params.reason },
      { timeoutMs: rt.config.rpcTimeoutMs },
    );
  } catch (err) {
    rt.logger.warn(`ovstream: subagent ${params.childSessionKey} end (${params.reason}) not recorded: ${describeError(err)}`);
  }
}
