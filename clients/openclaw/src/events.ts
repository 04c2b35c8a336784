/**
 * TurnEvent: what one afterTurn / commitTurn publishes, as JSON in the stream
 * entry field `e`. Field names, types and `v: 1` are core/events.py's
 * msgspec struct; the Python capture worker decodes it strictly, so this
 * module makes sure every value has the type msgspec expects (ints are ints,
 * no lone UTF-16 surrogates, messages are objects).
 */

import { randomUUID } from "node:crypto";

import type { AgentMessage } from "./types.js";

export const EVENT_VERSION = 1;
/** The stream entry field holding the encoded event. */
export const STREAM_FIELD = "e";

export interface TurnEvent {
  v: typeof EVENT_VERSION;
  event_id: string;
  /** OpenClaw's sessionId, raw: the worker maps it to the OV id itself. */
  session_id: string;
  session_key: string | null;
  /** runtimeContext.agentId (or the commitTurn admission's agentId), raw. */
  agent_id: string | null;
  /** afterTurn: the whole transcript; commitTurn: the accepted turn's messages. */
  messages: AgentMessage[];
  pre_prompt_message_count: number;
  is_heartbeat: boolean;
  token_budget: number | null;
  /** Unix seconds when the plugin built the event. */
  published_at: number;
  /** commitTurn's key (OpenClaw >= 2026.8.1); capture dedupes on it. */
  advancement_key: string | null;
  /** Tenant label selecting the OV user key on the service; null: the default. */
  user: string | null;
  /** A commit marker (no messages): capture commits the session after every earlier turn. */
  commit: string | null;
  /** bootstrap's import of a transcript older than ovstream (written only into a new session). */
  import_transcript: boolean;
  /** The `openclaw ovstream import` run that sent this import (capture records its outcome under it). */
  import_run: string | null;
  /** Set only by `ovstream dlq replay`: the session's dead letters apply here, in order. */
  release: boolean;
}

export interface TurnInput {
  sessionId: string;
  sessionKey?: string | null;
  agentId?: unknown;
  messages: unknown;
  prePromptMessageCount?: unknown;
  isHeartbeat?: unknown;
  tokenBudget?: unknown;
  advancementKey?: string | null;
  user?: string | null;
  commit?: string | null;
  importTranscript?: boolean;
  importRun?: string | null;
  /** Injected in tests. */
  now?: () => number;
  eventId?: string;
}

export class EventEncodeError extends Error {
  override name = "EventEncodeError";
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function nonEmptyString(value: unknown): string | null {
  return typeof value === "string" && value.length > 0 ? value : null;
}

function positiveIntOrNull(value: unknown): number | null {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    return null;
  }
  return Math.floor(value);
}

/**
 * Build the event of one turn. Non-object transcript entries (which msgspec
 * would reject as a whole) are left out, and prePromptMessageCount is
 * re-counted over what is kept so it still marks the same boundary.
 */
export function buildTurnEvent(input: TurnInput): TurnEvent {
  const raw = Array.isArray(input.messages) ? (input.messages as unknown[]) : [];
  let pre = 0;
  const requested = input.prePromptMessageCount;
  if (typeof requested === "number" && Number.isFinite(requested) && requested > 0) {
    pre = Math.floor(requested);
  }
  const messages: AgentMessage[] = [];
  let keptBeforePrompt = 0;
  raw.forEach((m, i) => {
    if (isPlainObject(m)) {
      messages.push(m);
      if (i < pre) {
        keptBeforePrompt += 1;
      }
    }
  });
  const now = input.now ?? Date.now;
  return {
    v: EVENT_VERSION,
    event_id: input.eventId ?? randomUUID(),
    session_id: input.sessionId,
    session_key: nonEmptyString(input.sessionKey),
    agent_id: nonEmptyString(input.agentId),
    messages,
    pre_prompt_message_count: keptBeforePrompt,
    is_heartbeat: input.isHeartbeat === true,
    token_budget: positiveIntOrNull(input.tokenBudget),
    published_at: now() / 1000,
    advancement_key: nonEmptyString(input.advancementKey),
    user: nonEmptyString(input.user),
    commit: nonEmptyString(input.commit),
    import_transcript: input.importTranscript === true,
    import_run: nonEmptyString(input.importRun),
    release: false,
  };
}

// JSON.stringify writes a lone surrogate as a \udXXX escape (paired ones stay
// raw characters), and msgspec rejects such an escape, failing the whole
// event. An escape preceded by an odd number of backslashes is one; an even
// number means the backslashes are themselves escaped text.
const LONE_SURROGATE_ESCAPE = /(?<!\\)((?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/gi;

/** The event as the JSON text that goes into the stream entry field `e`. */
export function encodeTurnEvent(event: TurnEvent): string {
  let json: string;
  try {
    json = JSON.stringify(event);
  } catch (err) {
    throw new EventEncodeError(`turn event is not JSON-serialisable: ${(err as Error).message}`);
  }
  if (json.includes("\\ud") || json.includes("\\uD")) {
    json = json.replace(LONE_SURROGATE_ESCAPE, "$1\\ufffd");
  }
  return json;
}

/** Parse an encoded event back (tests, diagnostics); checks the version. */
export function decodeTurnEvent(json: string): TurnEvent {
  const obj: unknown = JSON.parse(json);
  if (!isPlainObject(obj) || obj.v !== EVENT_VERSION) {
    throw new EventEncodeError("not a version-1 turn event");
  }
  return obj as unknown as TurnEvent;
}
