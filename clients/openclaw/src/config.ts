/**
 * Plugin configuration: `plugins.entries.ovstream.config` in openclaw.json.
 *
 * The seed's keys are accepted with the seed's defaults. The plugin itself
 * applies `autoCapture`, `bypassSessionPatterns` and (for the per-LLM-call
 * recall assemble) `autoRecall` locally to save a round trip; the other seed
 * keys (commit threshold, recall tuning, agent_prefix, baseUrl) are enforced
 * by the ovstream service from its own config (config/ovstream.toml or
 * OVSTREAM_* variables) — setting them here only documents intent, and the
 * plugin says so in its log when they differ from the defaults.
 */

import { compileRule, personalKinds, REDACTION_MODES, type RedactionMode, type RuleSpec } from "./redaction.js";

export interface PluginConfig {
  // --- the seed's table ---
  baseUrl: string;
  agent_prefix: string;
  autoCapture: boolean;
  autoRecall: boolean;
  commitTokenThreshold: number;
  commitKeepRecentCount: number;
  recallLimit: number;
  recallScoreThreshold: number;
  recallMaxInjectedChars: number;
  recallPreferAbstract: boolean;
  bypassSessionPatterns: string[];
  // --- ovstream ---
  redisUrl: string;
  /** redisUrl names a node of a Redis Cluster (the service's redisCluster). */
  redisCluster: boolean;
  /** host:port of Redis Sentinels; Redis is then the master they name `redisMasterName`. */
  redisSentinels: string[];
  redisMasterName: string;
  /** Replicas that must hold a turn before it counts as delivered (Redis WAIT); 0: the master's word. */
  publishReplicas: number;
  /** How long a publish waits for those replicas before the turn stays buffered and goes again. */
  publishReplicasTimeoutMs: number;
  rpcUrl: string;
  shards: number;
  keyPrefix: string;
  rpcTimeoutMs: number;
  compactTimeoutMs: number;
  toolTimeoutMs: number;
  bufferMaxEvents: number;
  bufferMaxBytes: number;
  apiKey?: string;
  /** Sent to the RPC as `Authorization: Bearer` (the service's rpcToken / rpcCredentials). */
  rpcToken?: string;
  /** rediss:// only: PEM files of the CA verifying Redis and of a client certificate. */
  redisCaFile?: string;
  redisCertFile?: string;
  redisKeyFile?: string;
  user?: string;
  /** Where the spool and import markers live; default `<OpenClaw state dir>/ovstream`. */
  stateDir?: string;
  /** Tool name -> the name to register it under (a name another plugin holds). */
  toolNames: Record<string, string>;
  /** What a secret in a turn becomes before it is published (src/redaction.ts). */
  redaction: RedactionMode;
  /** Agent id -> its own redaction mode. */
  redactionAgents: Record<string, RedactionMode>;
  /** Personal data kinds masked too (opt-in). */
  redactionPersonal: string[];
  /** Secrets of the deployment's own kinds. */
  redactionCustomPatterns: RuleSpec[];
}

export const DEFAULTS: Readonly<PluginConfig> = Object.freeze({
  baseUrl: "http://127.0.0.1:1933",
  agent_prefix: "",
  autoCapture: true,
  autoRecall: true,
  commitTokenThreshold: 20_000,
  commitKeepRecentCount: 10,
  recallLimit: 6,
  recallScoreThreshold: 0.15,
  recallMaxInjectedChars: 4000,
  recallPreferAbstract: false,
  bypassSessionPatterns: [] as string[],
  redisUrl: "redis://127.0.0.1:6379/0",
  redisCluster: false,
  redisSentinels: [] as string[],
  redisMasterName: "mymaster",
  publishReplicas: 0,
  publishReplicasTimeoutMs: 1000,
  rpcUrl: "http://127.0.0.1:8787",
  shards: 4,
  keyPrefix: "ovstream",
  rpcTimeoutMs: 8000,
  // OpenClaw bounds compaction at 180 s; the service answers within 150 s.
  compactTimeoutMs: 170_000,
  toolTimeoutMs: 120_000,
  bufferMaxEvents: 1000,
  bufferMaxBytes: 64 * 1024 * 1024,
  toolNames: {} as Record<string, string>,
  redaction: "mask" as RedactionMode,
  redactionAgents: {} as Record<string, RedactionMode>,
  redactionPersonal: [] as string[],
  redactionCustomPatterns: [] as RuleSpec[],
});

/** Seed keys the service applies from its own config, not the plugin. */
export const SERVICE_SIDE_KEYS = [
  "baseUrl",
  "agent_prefix",
  "commitTokenThreshold",
  "commitKeepRecentCount",
  "recallLimit",
  "recallScoreThreshold",
  "recallMaxInjectedChars",
  "recallPreferAbstract",
] as const;

export class ConfigError extends Error {
  override name = "ConfigError";
}

type Kind = "string" | "boolean" | "int" | "number" | "patterns" | "addresses" | "names" | "modes" | "kinds" | "rules";

const ADDRESS = /^[^\s,]+:\d{1,5}$/;

const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

interface KeySpec {
  kind: Kind;
  min?: number;
  max?: number;
  pattern?: RegExp;
  patternHelp?: string;
  optional?: boolean;
  description: string;
}

const HTTP_URL = /^https?:\/\/[^\s]+$/;

export const KEY_SPECS: Record<keyof PluginConfig, KeySpec> = {
  baseUrl: { kind: "string", pattern: HTTP_URL, patternHelp: "an http(s) URL", description: "OpenViking server URL (used by the ovstream service; informational here)" },
  agent_prefix: { kind: "string", description: "Agent id prefix (applied by the ovstream service)" },
  autoCapture: { kind: "boolean", description: "Publish every turn for capture into the OV session" },
  autoRecall: { kind: "boolean", description: "Let the per-LLM-call assemble inject recalled memories" },
  commitTokenThreshold: { kind: "int", min: 1, description: "pending_tokens that trigger a background commit (applied by the service)" },
  commitKeepRecentCount: { kind: "int", min: 0, max: 1000, description: "Messages kept active after a capture commit (applied by the service)" },
  recallLimit: { kind: "int", min: 1, max: 100, description: "Most memories auto-recall injects (applied by the service)" },
  recallScoreThreshold: { kind: "number", min: 0, max: 1, description: "Recall score floor (applied by the service)" },
  recallMaxInjectedChars: { kind: "int", min: 1, description: "Most characters auto-recall injects (applied by the service)" },
  recallPreferAbstract: { kind: "boolean", description: "Inject abstracts instead of full memory text (applied by the service)" },
  bypassSessionPatterns: { kind: "patterns", description: "Globs on the sessionKey (else sessionId) that skip ovstream entirely; * stays in one ':' segment, ** spans anything" },
  redisUrl: { kind: "string", pattern: /^rediss?:\/\/[^\s]+$/, patternHelp: "a redis:// or rediss:// URL", description: "Redis holding the turn streams" },
  redisCluster: { kind: "boolean", description: "redisUrl is one node of a Redis Cluster; must equal the service's redisCluster" },
  redisSentinels: { kind: "addresses", description: "host:port of Redis Sentinels (as the service's redisSentinels): Redis is then the master they know as redisMasterName, asked of them on every connect; redisUrl still gives the database, password and TLS" },
  redisMasterName: { kind: "string", pattern: /^\S+$/, patternHelp: "a name without spaces", description: "The name the Sentinels monitor the master under (as the service's redisMasterName)" },
  publishReplicas: { kind: "int", min: 0, max: 16, description: "Replicas that must hold a turn before it counts as delivered (Redis WAIT); a turn they do not confirm in time stays buffered and is sent again. 0: the master's acknowledgement, which a failover can lose" },
  publishReplicasTimeoutMs: { kind: "int", min: 1, max: 60000, description: "How long a publish waits for publishReplicas replicas" },
  rpcUrl: { kind: "string", pattern: HTTP_URL, patternHelp: "an http(s) URL", description: "Where the ovstream RPC listens" },
  shards: { kind: "int", min: 1, max: 1024, description: "Number of turn streams; must equal the service's shards" },
  keyPrefix: { kind: "string", pattern: /^[A-Za-z0-9_.-]+$/, patternHelp: "letters, digits, _ . -", description: "Prefix of every Redis key; must equal the service's keyPrefix" },
  rpcTimeoutMs: { kind: "int", min: 1, description: "Timeout of an assemble call; on timeout the messages pass through" },
  compactTimeoutMs: { kind: "int", min: 1, description: "Timeout of a compact call (the service waits for the commit)" },
  toolTimeoutMs: { kind: "int", min: 1, description: "Timeout of a tool call" },
  bufferMaxEvents: { kind: "int", min: 1, description: "Turn events kept in memory while Redis is unreachable; the oldest are dropped beyond" },
  bufferMaxBytes: { kind: "int", min: 1024, description: "Bytes of turn events kept in memory while Redis is unreachable" },
  apiKey: { kind: "string", optional: true, description: "OV user key sent to the RPC as X-OpenViking-API-Key (the tenant of assemble/compact/tools)" },
  redisCaFile: { kind: "string", optional: true, description: "PEM file of the CA that verifies a rediss:// Redis (default: Node's CAs)" },
  redisCertFile: { kind: "string", optional: true, description: "PEM client certificate for a Redis that requires one (tls-auth-clients)" },
  redisKeyFile: { kind: "string", optional: true, description: "PEM key of redisCertFile" },
  rpcToken: { kind: "string", optional: true, description: "Token sent to the RPC as Authorization: Bearer (the service's rpcToken or one of its rpcCredentials); write ${ENV_VAR} to keep it out of the config" },
  user: { kind: "string", optional: true, description: "Tenant label put on turn events (selects the service's user_api_keys entry)" },
  stateDir: { kind: "string", optional: true, description: "Directory for the turn spool and import markers (default: <OpenClaw state dir>/ovstream)" },
  redaction: { kind: "string", pattern: /^(mask|drop|off)$/, patternHelp: "mask, drop or off", description: "What a secret in a turn (an API key, a token, a password, a private key) becomes before the turn is published, as the service's redaction: mask (a typed placeholder, <redacted:jwt#1>), drop (the message's content withheld) or off" },
  redactionAgents: { kind: "modes", description: "Agent id -> its own redaction (mask, drop or off), over redaction" },
  redactionPersonal: { kind: "kinds", description: "Personal data kinds masked too (opt-in): email, phone, card_number, iban" },
  redactionCustomPatterns: { kind: "rules", description: "Secrets of the deployment's own kinds, as the service's redactionCustomPatterns: each {kind, pattern, flags?, group?} (the regular expression syntax Python and JavaScript share)" },
  toolNames: { kind: "names", description: "Register a tool under another name, e.g. {\"memory_search\": \"ov_memory_search\"} when another plugin holds the name" },
};

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "string" ? JSON.stringify(value) : `${typeof value} ${String(value)}`;
}

/** Keys whose values are secrets: never shown in an error. */
const SECRET_CONFIG_KEYS = new Set(["apiKey", "rpcToken", "redisUrl"]);
const ENV_REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** `${NAME}` in a string value replaced by the environment variable NAME (a secret stays out of the config). */
function expandEnv(key: string, text: string): string {
  return text.replace(ENV_REFERENCE, (_whole, name: string) => {
    const value = process.env[name];
    if (value === undefined) {
      throw new ConfigError(`ovstream config: ${key} refers to \${${name}}, but the environment variable ${name} is not set`);
    }
    return value;
  });
}

function checkValue(key: string, spec: KeySpec, value: unknown): unknown {
  const fail = (what: string): never => {
    const shown = SECRET_CONFIG_KEYS.has(key) ? "(a value not shown: it may hold a secret)" : describe(value);
    throw new ConfigError(`ovstream config: ${key} must be ${what}, got ${shown}`);
  };
  switch (spec.kind) {
    case "boolean":
      if (typeof value !== "boolean") fail("true or false");
      return value;
    case "string": {
      if (typeof value !== "string") fail("a string");
      const text = expandEnv(key, (value as string).trim());
      if (spec.pattern && !spec.pattern.test(text)) fail(spec.patternHelp ?? `matching ${spec.pattern}`);
      return text;
    }
    case "int":
    case "number": {
      let n = value;
      if (typeof n === "string" && n.trim() !== "" && Number.isFinite(Number(n))) n = Number(n);
      if (typeof n !== "number" || !Number.isFinite(n)) fail("a number");
      const num = n as number;
      if (spec.kind === "int" && !Number.isInteger(num)) fail("a whole number");
      if (spec.min !== undefined && num < spec.min) fail(`at least ${spec.min}`);
      if (spec.max !== undefined && num > spec.max) fail(`at most ${spec.max}`);
      return num;
    }
    case "names": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) fail("an object of tool name -> new name");
      const out: Record<string, string> = {};
      for (const [from, to] of Object.entries(value as Record<string, unknown>)) {
        if (typeof to !== "string" || !TOOL_NAME.test(to.trim())) fail(`an object whose values are tool names (${from})`);
        out[from] = (to as string).trim();
      }
      return out;
    }
    case "modes": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) fail("an object of agent id -> mask, drop or off");
      for (const [agent, mode] of Object.entries(value as Record<string, unknown>)) {
        if (!REDACTION_MODES.includes(mode as RedactionMode)) fail(`an object whose values are mask, drop or off (${agent})`);
      }
      return { ...(value as Record<string, RedactionMode>) };
    }
    case "kinds": {
      const kinds = typeof value === "string" ? value.split(",").map((k) => k.trim()).filter(Boolean) : value;
      const known = personalKinds();
      if (!Array.isArray(kinds) || kinds.some((k) => !known.includes(k as string))) fail(`a list of ${known.join(", ")}`);
      return kinds as string[];
    }
    case "rules": {
      if (!Array.isArray(value)) fail("a list of {kind, pattern, flags?, group?}");
      for (const spec of value as RuleSpec[]) {
        try {
          compileRule(spec);
        } catch (err) {
          fail(`a list of valid patterns (${(err as Error).message})`);
        }
      }
      return (value as RuleSpec[]).map((spec) => ({ ...spec }));
    }
    case "patterns":
    case "addresses": {
      const items = typeof value === "string" ? value.split(",") : value;
      if (!Array.isArray(items) || items.some((p) => typeof p !== "string")) fail("a list of strings");
      const list = (items as string[]).map((p) => p.trim()).filter((p) => p.length > 0);
      if (spec.kind === "addresses" && list.some((a) => !ADDRESS.test(a))) fail("a list of host:port");
      return list;
    }
  }
}

/**
 * Keys earlier versions read, still accepted (and ignored, with a warning) so an old
 * config keeps loading; the value says why the key is gone.
 */
export const RETIRED_KEYS: Readonly<Record<string, string>> = Object.freeze({
  streamMaxLen: "the streams are no longer capped at publish; capture trims only what it applied",
});

export interface ParsedConfig {
  config: PluginConfig;
  /** Keys given that the plugin does not know (ignored). */
  unknownKeys: string[];
  /** Retired keys given (ignored); see RETIRED_KEYS. */
  retiredKeys: string[];
  /** Seed keys set to a non-default value that only the service applies. */
  serviceSideKeysSet: string[];
}

/** Validate raw plugin config over the defaults; a bad value throws ConfigError naming the key. */
export function parseConfigDetailed(raw: unknown): ParsedConfig {
  if (raw !== undefined && raw !== null && (typeof raw !== "object" || Array.isArray(raw))) {
    throw new ConfigError(`ovstream config must be an object, got ${describe(raw)}`);
  }
  const input = (raw ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {
    ...DEFAULTS,
    bypassSessionPatterns: [...DEFAULTS.bypassSessionPatterns],
    redisSentinels: [...DEFAULTS.redisSentinels],
    toolNames: { ...DEFAULTS.toolNames },
    redactionAgents: { ...DEFAULTS.redactionAgents },
    redactionPersonal: [...DEFAULTS.redactionPersonal],
    redactionCustomPatterns: [...DEFAULTS.redactionCustomPatterns],
  };
  const unknownKeys: string[] = [];
  const retiredKeys: string[] = [];
  for (const [key, value] of Object.entries(input)) {
    if (Object.hasOwn(RETIRED_KEYS, key)) {
      retiredKeys.push(key);
      continue;
    }
    const spec = (KEY_SPECS as Record<string, KeySpec | undefined>)[key];
    if (spec === undefined) {
      unknownKeys.push(key);
      continue;
    }
    if (value === undefined || (value === null && spec.optional)) {
      continue;
    }
    const checked = checkValue(key, spec, value);
    if (spec.optional && checked === "") {
      continue;
    }
    out[key] = checked;
  }
  const config = out as unknown as PluginConfig;
  if (config.redisCluster && config.redisSentinels.length > 0) {
    throw new ConfigError("ovstream config: set redisCluster or redisSentinels, not both (a Redis Cluster fails over by itself)");
  }
  const serviceSideKeysSet = SERVICE_SIDE_KEYS.filter(
    (k) => k in input && JSON.stringify(config[k]) !== JSON.stringify(DEFAULTS[k]),
  );
  return { config, unknownKeys, retiredKeys, serviceSideKeysSet };
}

export function parseConfig(raw: unknown): PluginConfig {
  return parseConfigDetailed(raw).config;
}

/** JSON Schema of the config (the same one openclaw.plugin.json declares). */
export function configJsonSchema(): Record<string, unknown> {
  const properties: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(KEY_SPECS) as [keyof PluginConfig, KeySpec][]) {
    const prop: Record<string, unknown> = { description: spec.description };
    switch (spec.kind) {
      case "boolean":
        prop.type = "boolean";
        break;
      case "string":
        prop.type = "string";
        if (spec.pattern) prop.pattern = spec.pattern.source;
        break;
      case "int":
        prop.type = "integer";
        break;
      case "number":
        prop.type = "number";
        break;
      case "patterns":
        prop.type = "array";
        prop.items = { type: "string" };
        break;
      case "addresses":
        prop.type = "array";
        prop.items = { type: "string", pattern: ADDRESS.source };
        break;
      case "names":
        prop.type = "object";
        prop.additionalProperties = { type: "string", pattern: TOOL_NAME.source };
        break;
      case "modes":
        prop.type = "object";
        prop.additionalProperties = { type: "string", enum: [...REDACTION_MODES] };
        break;
      case "kinds":
        prop.type = "array";
        prop.items = { type: "string", enum: personalKinds() };
        break;
      case "rules":
        prop.type = "array";
        prop.items = { type: "object", required: ["kind", "pattern"], properties: { kind: { type: "string" }, pattern: { type: "string" }, flags: { type: "string" }, group: { type: "integer", minimum: 0 } } };
        break;
    }
    if (spec.min !== undefined) prop.minimum = spec.min;
    if (spec.max !== undefined) prop.maximum = spec.max;
    const def = DEFAULTS[key];
    if (def !== undefined) prop.default = def;
    properties[key] = prop;
  }
  for (const [key, why] of Object.entries(RETIRED_KEYS)) {
    properties[key] = { description: `Retired, ignored: ${why}` };
  }
  return { type: "object", additionalProperties: false, properties };
}
