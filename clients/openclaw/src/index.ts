/**
 * ovstream's OpenClaw plugin entry.
 *
 * Registers the `ovstream` context engine and the eight memory tools. The
 * engine is thin: turns go to Redis Streams for the ovstream capture worker,
 * assemble / compact / tools are calls to the ovstream RPC. Nothing connects
 * at load time: Redis is dialled on the first published turn.
 */

import { ConfigError, configJsonSchema, parseConfigDetailed, RETIRED_KEYS, type PluginConfig } from "./config.js";
import { registerCli } from "./cli.js";
import { createEngine, ENGINE_ID } from "./engine.js";
import { PluginRuntime, type RuntimeOptions } from "./runtime.js";
import { quietRegistration, sayOnce } from "./registration.js";
import { registerTools } from "./tools.js";
import type { PluginApi } from "./types.js";

export { createEngine } from "./engine.js";
export { PluginRuntime } from "./runtime.js";
export { parseConfig, DEFAULTS } from "./config.js";
export { ovSessionId, isBypassed } from "./ids.js";
export { shardOf, streamKey } from "./keys.js";
export { buildTurnEvent, encodeTurnEvent } from "./events.js";
export { TOOL_SPECS, TOOL_NAMES } from "./tools.js";

export const PLUGIN_ID = "ovstream";

function safeParse(value: unknown) {
  try {
    return { success: true as const, data: parseConfigDetailed(value).config };
  } catch (err) {
    return {
      success: false as const,
      error: { issues: [{ path: [] as Array<string | number>, message: (err as Error).message }] },
    };
  }
}

/**
 * Register into `api`. Returns the runtime (tests drive it directly), or
 * undefined when the config is invalid — then nothing is registered and
 * OpenClaw keeps its default engine.
 */
export function registerOvstream(api: PluginApi, options: RuntimeOptions = {}): PluginRuntime | undefined {
  const logger = api.logger;
  let config: PluginConfig;
  try {
    const parsed = parseConfigDetailed(api.pluginConfig);
    config = parsed.config;
    if (parsed.unknownKeys.length > 0) {
      sayOnce(logger, "warn", `ovstream: unknown config keys ignored: ${parsed.unknownKeys.join(", ")}`);
    }
    for (const key of parsed.retiredKeys) {
      sayOnce(logger, "warn", `ovstream: config key ${key} is no longer used (${RETIRED_KEYS[key]}); ignoring it`);
    }
    if (parsed.serviceSideKeysSet.length > 0 && !quietRegistration(api)) {
      sayOnce(
        logger,
        "info",
        `ovstream: ${parsed.serviceSideKeysSet.join(", ")} are applied by the ovstream service; ` +
          "set them in its config (config/ovstream.toml or OVSTREAM_* variables) as well",
      );
    }
  } catch (err) {
    if (err instanceof ConfigError) {
      logger.error(`${err.message}; the ovstream context engine is not registered`);
      return undefined;
    }
    throw err;
  }
  const rt = new PluginRuntime(config, logger, options);
  const tools = registerTools(api, rt);
  if (typeof api.registerContextEngine === "function") {
    api.registerContextEngine(ENGINE_ID, () => createEngine(rt));
  } else {
    logger.warn("ovstream: registerContextEngine is unavailable (OpenClaw too old?); turns will not be captured");
  }
  registerSessionEndHooks(api, rt);
  registerCli(api, rt);
  if (typeof api.registerService === "function") {
    api.registerService({
      id: "ovstream-turn-publisher",
      // Nothing to start: Redis is dialled on the first published turn.
      start: () => undefined,
      stop: async () => void (await rt.close(2000)),
    });
  }
  if (!quietRegistration(api)) {
    sayOnce(
      logger,
      "info",
      `ovstream: registered context engine "${ENGINE_ID}" and ${tools} tools ` +
        `(redis ${redact(config.redisUrl)}, ${config.shards} shards, prefix "${config.keyPrefix}", rpc ${config.rpcUrl})`,
    );
  }
  return rt;
}

/** session_end reasons after which the conversation does not go on: commit it. */
export const COMMIT_ON_SESSION_END = new Set(["new", "reset", "idle", "daily", "deleted", "unknown"]);

/**
 * Commit a conversation that ends (/reset, /new, idle or daily rollover,
 * deletion): a commit marker follows its turns through the stream, so the
 * commit sees every turn. Shutdown and restart do not end a conversation.
 */
function registerSessionEndHooks(api: PluginApi, rt: PluginRuntime): void {
  if (typeof api.on !== "function") {
    rt.logger.warn("ovstream: api.on is unavailable; conversations are not committed when they end");
    return;
  }
  api.on("before_reset", (_event, ctx) => {
    rt.endSession(ctx, "reset");
  });
  api.on("session_end", (event, ctx) => {
    const reason = typeof event.reason === "string" ? event.reason : "unknown";
    if (!COMMIT_ON_SESSION_END.has(reason)) return;
    const sessionId = typeof event.sessionId === "string" ? event.sessionId : ctx.sessionId;
    const sessionKey = typeof event.sessionKey === "string" ? event.sessionKey : ctx.sessionKey;
    rt.endSession({ sessionId, sessionKey, agentId: ctx.agentId }, reason);
  });
}

/** A URL with its password hidden, for logs. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url;
  }
}

const plugin = {
  id: PLUGIN_ID,
  name: "ovstream",
  description:
    "OpenViking context engine over Redis Streams: publishes turns for capture, assembles context and runs memory tools through the ovstream service",
  kind: "context-engine" as const,
  configSchema: {
    jsonSchema: configJsonSchema(),
    safeParse,
    parse: (value: unknown) => parseConfigDetailed(value).config,
  },
  register(api: PluginApi): void {
    registerOvstream(api);
  },
};

export default plugin;
