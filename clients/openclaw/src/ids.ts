/**
 * OpenClaw session ids mapped to the OV session id, and the bypass globs.
 *
 * Must agree with the Python side (core/ids.py): the shard a turn is written
 * to depends on the OV id, and the capture worker computes the same id from
 * the raw sessionId/sessionKey the event carries. test/ids.test.ts runs one
 * table of cases through both.
 */

import { createHash } from "node:crypto";

// Python's str.strip() removes exactly the characters str.isspace() accepts;
// JavaScript's trim() differs (it strips U+FEFF, keeps U+001C-U+001F and
// U+0085), so we strip Python's set to name sessions identically.
const PY_SPACE = "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const PY_STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "g");

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** Characters a Windows file name cannot hold (an OV session id is one path segment). */
const WINDOWS_ILLEGAL = /[:<>"\\/|?*\u0000-\u001f]/;

const SESSION_HASH_SALT = "openclaw-session:";

export function pyStrip(text: string | null | undefined): string {
  return (text ?? "").replace(PY_STRIP, "");
}

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * The OV session id of an OpenClaw session: a UUID sessionId lower-cased;
 * else sha256 of a non-empty sessionKey; else, when the id holds a
 * Windows-illegal character, sha256 of "openclaw-session:" + id; else the id.
 * Both inputs are trimmed first. Throws when neither gives anything.
 *
 * ovstream's extension (as core/ids.py): a dot-segment id ("." or "..") is hashed
 * like a Windows-illegal one, and an all-whitespace id is hashed untrimmed.
 */
export function ovSessionId(sessionId: string | null | undefined, sessionKey?: string | null): string {
  const raw = sessionId ?? "";
  const sid = pyStrip(raw);
  const key = pyStrip(sessionKey);
  if (sid && UUID.test(sid)) {
    return sid.toLowerCase();
  }
  if (key) {
    return sha256Hex(key);
  }
  if (!raw) {
    throw new Error("an OpenClaw session needs a non-empty sessionId or sessionKey");
  }
  if (!sid) {
    return sha256Hex(SESSION_HASH_SALT + raw);
  }
  if (WINDOWS_ILLEGAL.test(sid) || sid === "." || sid === "..") {
    return sha256Hex(SESSION_HASH_SALT + sid);
  }
  return sid;
}

const globCache = new Map<string, RegExp>();

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

/**
 * A bypass glob as a full-match RegExp: `**` spans anything, `*` stays within
 * one `:`-separated segment, every other character (`?` too) is literal.
 */
export function compileSessionGlob(pattern: string): RegExp {
  let rx = globCache.get(pattern);
  if (rx === undefined) {
    const body = pattern
      .split("**")
      .map((chunk) => chunk.split("*").map(escapeRegExp).join("[^:]*"))
      .join("[\\s\\S]*");
    rx = new RegExp(`^(?:${body})$`);
    if (globCache.size > 256) {
      globCache.clear();
    }
    globCache.set(pattern, rx);
  }
  return rx;
}

/**
 * Whether the session matches a bypass glob: matched against the trimmed
 * sessionKey when non-empty, else the trimmed sessionId.
 */
export function isBypassed(
  patterns: readonly string[],
  sessionId: string | null | undefined,
  sessionKey?: string | null,
): boolean {
  if (patterns.length === 0) {
    return false;
  }
  const candidate = pyStrip(sessionKey) || pyStrip(sessionId);
  if (!candidate) {
    return false;
  }
  return patterns.some((p) => compileSessionGlob(p).test(candidate));
}

/** The sessionKey of a hook call: the parameter, else runtimeContext.sessionKey. */
export function resolveSessionKey(params: {
  sessionKey?: unknown;
  runtimeContext?: Record<string, unknown> | undefined;
}): string | undefined {
  if (typeof params.sessionKey === "string" && pyStrip(params.sessionKey)) {
    return params.sessionKey;
  }
  const fromRuntime = params.runtimeContext?.sessionKey;
  if (typeof fromRuntime === "string" && pyStrip(fromRuntime)) {
    return fromRuntime;
  }
  return undefined;
}
