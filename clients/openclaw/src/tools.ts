/**
 * The eight agent tools. Each is a thin proxy: POST /v1/tools/{name}
 * {sessionId?, sessionKey?, runtimeContext?, params} and the RPC's
 * {content, details} is the tool result. Parameter schemas mirror the RPC's
 * validation (workers/rpc/models.py) so the model sees the same contract.
 */

import { isBypassed } from "./ids.js";
import { quietRegistration, sayOnce } from "./registration.js";
import type { PluginRuntime } from "./runtime.js";
import type { AgentTool, PluginApi, ToolContext, ToolResult } from "./types.js";

type Schema = Record<string, unknown>;

const str = (description: string, extra: Schema = {}): Schema => ({ type: "string", description, ...extra });
const int = (description: string, extra: Schema = {}): Schema => ({ type: "integer", description, ...extra });
const num = (description: string, extra: Schema = {}): Schema => ({ type: "number", description, ...extra });
const bool = (description: string): Schema => ({ type: "boolean", description });

function object(properties: Record<string, Schema>, required: string[] = []): Schema {
  const schema: Schema = { type: "object", properties, additionalProperties: false };
  if (required.length > 0) schema.required = required;
  return schema;
}

const VIKING_URI = { pattern: "^viking://", minLength: 1, maxLength: 2048 };
const ARCHIVE_ID = { pattern: "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$" };
const LIMIT = { minimum: 1, maximum: 100 };
const SCORE = { minimum: 0, maximum: 1 };

export interface ToolSpec {
  name: string;
  /** The service's name of a renamed tool (the RPC route). */
  serviceName?: string;
  label: string;
  description: string;
  parameters: Schema;
}

export const TOOL_SPECS: readonly ToolSpec[] = [
  {
    name: "memory_recall",
    label: "Memory Recall (ovstream)",
    description:
      "Search long-term memories (user and agent memories, optionally resources) in OpenViking. " +
      "Use when you need facts, preferences or decisions from earlier conversations.",
    parameters: object(
      {
        query: str("What to look for", { minLength: 1, maxLength: 4000 }),
        limit: int("Most results (default: service config)", LIMIT),
        scoreThreshold: num("Minimum score 0-1 (default: service config)", SCORE),
        targetUri: str("Search only under this viking:// URI", VIKING_URI),
        includeResources: bool("Also search viking://resources"),
      },
      ["query"],
    ),
  },
  {
    name: "memory_store",
    label: "Memory Store (ovstream)",
    description:
      "Store text as long-term memory now: it is written to an OpenViking session and committed, " +
      "so memories are extracted immediately. Use when the user explicitly asks you to remember something.",
    parameters: object(
      {
        text: str("The information to remember", { minLength: 1, maxLength: 200000 }),
        role: { type: "string", enum: ["user", "assistant"], description: "Who said it (default user)" },
        sessionId: str("An existing OpenViking session to write into (default: a temporary one)", { minLength: 1 }),
      },
      ["text"],
    ),
  },
  {
    name: "memory_forget",
    label: "Memory Forget (ovstream)",
    description:
      "Delete a memory by its exact viking:// URI, or search by query and delete only when one " +
      "strong match remains (otherwise the candidates are listed). Give uri or query.",
    parameters: object({
      uri: str("Exact memory URI to delete", VIKING_URI),
      query: str("Search for the memory to delete", { minLength: 1, maxLength: 4000 }),
      targetUri: str("Search scope URI", VIKING_URI),
      limit: int("Most candidates (default 5)", LIMIT),
      scoreThreshold: num("Minimum score 0-1", SCORE),
    }),
  },
  {
    name: "add_resource",
    label: "Add Resource (ovstream)",
    description:
      "Import a document, URL or Git repository into viking://resources. Give path (a URL or a file " +
      "path the ovstream service can read) or content with filename.",
    parameters: object({
      path: str("A URL, or a file path readable by the ovstream service", { minLength: 1, maxLength: 4096 }),
      content: str("Text to upload as a file (with filename)"),
      filename: str("File name for content", { minLength: 1, maxLength: 255, pattern: "^[^/\\\\\\u0000]+$" }),
      to: str("Exact target URI, e.g. viking://resources/project-docs", VIKING_URI),
      reason: str("Why this resource is added", { maxLength: 2000 }),
      wait: bool("Wait until processing is done"),
    }),
  },
  {
    name: "add_skill",
    label: "Add Skill (ovstream)",
    description: "Import a skill (SKILL.md) into viking://agent/skills. Give exactly one of content or path.",
    parameters: object({
      content: str("SKILL.md text", { minLength: 1 }),
      path: str("A SKILL.md file, or a directory holding one, readable by the ovstream service", { minLength: 1, maxLength: 4096 }),
      wait: bool("Wait until processing is done"),
    }),
  },
  {
    name: "memory_search",
    label: "Memory Search (ovstream)",
    description: "Search imported resources and agent skills in OpenViking.",
    parameters: object(
      {
        query: str("What to look for", { minLength: 1, maxLength: 4000 }),
        limit: int("Most results per scope (default 10)", LIMIT),
        uri: str("Search only under this viking:// URI (default: resources and agent skills)", VIKING_URI),
      },
      ["query"],
    ),
  },
  {
    name: "ov_archive_search",
    label: "Archive Search (ovstream)",
    description:
      "Keyword search over the archived original messages of the current session. Use when the " +
      "[Session History Summary] lacks a detail; search concrete words (names, paths, dates), and try " +
      "another wording before concluding something is not there.",
    parameters: object(
      {
        query: str("A keyword or short phrase (case-insensitive)", { minLength: 1, maxLength: 1000 }),
        archiveId: str('Only this archive, e.g. "archive_003"', ARCHIVE_ID),
      },
      ["query"],
    ),
  },
  {
    name: "ov_archive_expand",
    label: "Archive Expand (ovstream)",
    description:
      "Show the original messages of one archive of the current session (exact commands, paths, code " +
      "that the summary left out).",
    parameters: object({ archiveId: str('Archive id, e.g. "archive_002"', ARCHIVE_ID) }, ["archiveId"]),
  },
];

export const TOOL_NAMES: readonly string[] = TOOL_SPECS.map((t) => t.name);

function textResult(text: string, details: Record<string, unknown>): ToolResult {
  return { content: [{ type: "text", text }], details };
}

export function bypassedToolResult(toolName: string): ToolResult {
  return textResult(
    `ovstream is bypassed for this session (bypassSessionPatterns); ${toolName} was skipped.`,
    { action: "bypassed", reason: "session_bypassed", toolName },
  );
}

function isToolResult(value: unknown): value is { content: unknown[]; details?: unknown } {
  return typeof value === "object" && value !== null && Array.isArray((value as { content?: unknown }).content);
}

export function makeTool(rt: PluginRuntime, spec: ToolSpec, ctx: ToolContext): AgentTool {
  return {
    name: spec.name,
    label: spec.label,
    description: spec.description,
    parameters: spec.parameters,
    async execute(_toolCallId: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<ToolResult> {
      const sessionId = typeof ctx.sessionId === "string" && ctx.sessionId ? ctx.sessionId : undefined;
      const sessionKey = typeof ctx.sessionKey === "string" && ctx.sessionKey ? ctx.sessionKey : undefined;
      if (isBypassed(rt.config.bypassSessionPatterns, sessionId, sessionKey)) {
        return bypassedToolResult(spec.name);
      }
      const body: Record<string, unknown> = { params: params ?? {} };
      if (sessionId) body.sessionId = sessionId;
      if (sessionKey) body.sessionKey = sessionKey;
      const runtimeContext: Record<string, string> = {};
      if (typeof ctx.agentId === "string" && ctx.agentId) runtimeContext.agentId = ctx.agentId;
      if (sessionKey) runtimeContext.sessionKey = sessionKey;
      if (Object.keys(runtimeContext).length > 0) body.runtimeContext = runtimeContext;
      try {
        const res = await rt.rpc.post<unknown>(`/v1/tools/${spec.serviceName ?? spec.name}`, body, {
          timeoutMs: rt.config.toolTimeoutMs,
          signal,
        });
        if (!isToolResult(res)) {
          throw new Error("the answer has no content list");
        }
        const details = typeof res.details === "object" && res.details !== null ? (res.details as Record<string, unknown>) : {};
        return { content: res.content as ToolResult["content"], details };
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        rt.logger.warn(`ovstream: tool ${spec.name} failed: ${message}`);
        const status = (err as { status?: number }).status;
        return textResult(`${spec.name} failed: ${message}`, {
          action: "error",
          toolName: spec.name,
          error: message,
          ...(status ? { status } : {}),
        });
      }
    },
  };
}

/** Tools another bundled plugin registers under the same name (the host lets one shadow the other). */
export const NAMES_HELD_ELSEWHERE: Readonly<Record<string, string>> = { memory_search: "memory-core" };

/** Whether the bundled memory-core plugin is active in this host config. */
function memoryCoreActive(config: unknown): boolean {
  const plugins = (config as { plugins?: Record<string, unknown> } | undefined)?.plugins as
    | { enabled?: boolean; entries?: Record<string, { enabled?: boolean }>; slots?: { memory?: string } }
    | undefined;
  if (plugins?.enabled === false) return false;
  if (plugins?.entries?.["memory-core"]?.enabled === false) return false;
  const slot = plugins?.slots?.memory;
  return slot === undefined || slot === "memory-core";
}

export { SAID_ONCE } from "./registration.js";

/** A warning about the config, said once a process (src/registration.ts). */
function warnOnce(rt: PluginRuntime, message: string): void {
  sayOnce(rt.logger, "warn", message);
}

/** Register every tool as a factory, so each call knows its session; `toolNames` renames. */
export function registerTools(api: PluginApi, rt: PluginRuntime): number {
  if (typeof api.registerTool !== "function") {
    rt.logger.warn("ovstream: registerTool is unavailable; the memory tools are not registered");
    return 0;
  }
  const renames = rt.config.toolNames;
  for (const unknown of Object.keys(renames).filter((n) => !TOOL_NAMES.includes(n))) {
    warnOnce(rt, `ovstream: toolNames.${unknown}: no ovstream tool has that name (known: ${TOOL_NAMES.join(", ")})`);
  }
  for (const base of TOOL_SPECS) {
    const name = renames[base.name] ?? base.name;
    const owner = NAMES_HELD_ELSEWHERE[name];
    if (owner && memoryCoreActive(api.config) && !quietRegistration(api)) {
      warnOnce(
        rt,
        `ovstream: tool name ${name} is also registered by ${owner} (OpenClaw's bundled memory plugin); ` +
          `one shadows the other. Rename ours with plugins.entries.ovstream.config.toolNames.${base.name} ` +
          `(e.g. "ov_${base.name}"), or disable ${owner}`,
      );
    }
    const spec = name === base.name ? base : { ...base, name, serviceName: base.name };
    api.registerTool((ctx: ToolContext) => makeTool(rt, spec, ctx ?? {}), { name });
  }
  return TOOL_SPECS.length;
}
