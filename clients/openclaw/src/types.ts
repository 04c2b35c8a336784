/**
 * The slice of OpenClaw's plugin API this plugin touches, declared locally.
 *
 * Structurally compatible with OpenClaw's `src/context-engine/types.ts` and
 * `src/plugins/plugin-api.types.ts` (2026.x) so the plugin builds without a
 * dependency on a specific OpenClaw version. Only the fields we read or
 * return are spelled out; everything else passes through untyped.
 */

/** One transcript entry as OpenClaw holds it (user / assistant / toolResult ...). */
export type AgentMessage = Record<string, unknown>;

export interface PluginLogger {
  debug?: (message: string) => void;
  info: (message: string) => void;
  warn: (message: string) => void;
  error: (message: string) => void;
}

export type RuntimeContext = Record<string, unknown>;

export interface AssembleParams {
  sessionId: string;
  sessionKey?: string;
  messages: AgentMessage[];
  tokenBudget?: number;
  /** Present on the main call only (with prompt / citationsMode). */
  availableTools?: Set<string> | string[];
  citationsMode?: unknown;
  model?: string;
  prompt?: string;
  runtimeContext?: RuntimeContext;
}

export interface AssembleResult {
  messages: AgentMessage[];
  estimatedTokens: number;
  systemPromptAddition?: string;
}

export interface AfterTurnParams {
  sessionId: string;
  sessionKey?: string;
  sessionFile?: string;
  messages: AgentMessage[];
  prePromptMessageCount: number;
  autoCompactionSummary?: string;
  isHeartbeat?: boolean;
  tokenBudget?: number;
  runtimeContext?: RuntimeContext;
}

export interface CommitTurnParams {
  advancementKey: string;
  /** The accepted turn's own messages (not the whole transcript). */
  messages: AgentMessage[];
  sessionId: string;
  sessionKey?: string;
  admission?: { agentId?: string; sessionId?: string; sessionKey?: string; [k: string]: unknown };
  terminal?: Record<string, unknown>;
  runtimeContext?: RuntimeContext;
  isHeartbeat?: boolean;
}

export interface CommitTurnResult {
  status: "committed" | "duplicate";
}

export interface CompactParams {
  sessionId: string;
  sessionKey?: string;
  sessionFile?: string;
  tokenBudget?: number;
  force?: boolean;
  currentTokenCount?: number;
  compactionTarget?: "budget" | "threshold";
  customInstructions?: string;
  runtimeContext?: RuntimeContext;
  abortSignal?: AbortSignal;
}

export interface CompactResult {
  ok: boolean;
  compacted: boolean;
  reason?: string;
  result?: {
    summary?: string;
    firstKeptEntryId?: string;
    tokensBefore: number;
    tokensAfter?: number;
    details?: unknown;
  };
}

export interface BootstrapParams {
  sessionId: string;
  sessionKey?: string;
  sessionFile?: string;
  sessionTarget?: { agentId?: string; sessionId?: string; sessionKey?: string; [k: string]: unknown };
  runtimeContext?: RuntimeContext;
}

export interface BootstrapResult {
  bootstrapped: boolean;
  importedMessages?: number;
  reason?: string;
}

export interface ContextEngineInfo {
  id: string;
  name: string;
  version?: string;
  ownsCompaction?: boolean;
  transcriptSemantics?: {
    currentTurnFence?: "before-current-turn-entry-v1";
    turnAdvancementIdempotency?: "atomic-idempotent-v1";
  };
}

export interface ContextEngine {
  readonly info: ContextEngineInfo;
  ingest(params: { sessionId: string; sessionKey?: string; message: AgentMessage; isHeartbeat?: boolean }): Promise<{ ingested: boolean }>;
  ingestBatch(params: { sessionId: string; sessionKey?: string; messages: AgentMessage[]; isHeartbeat?: boolean }): Promise<{ ingestedCount: number }>;
  afterTurn(params: AfterTurnParams): Promise<void>;
  commitTurn(params: CommitTurnParams): Promise<CommitTurnResult>;
  bootstrap(params: BootstrapParams): Promise<BootstrapResult>;
  assemble(params: AssembleParams): Promise<AssembleResult>;
  compact(params: CompactParams): Promise<CompactResult>;
  prepareSubagentSpawn?(params: SubagentSpawnParams): Promise<SubagentSpawnPreparation | undefined>;
  onSubagentEnded?(params: SubagentEndedParams): Promise<void>;
  dispose(): Promise<void>;
}

/** OpenClaw's prepareSubagentSpawn params (2026.9). */
export interface SubagentSpawnParams {
  parentSessionKey: string;
  childSessionKey: string;
  contextMode?: "isolated" | "fork";
  parentSessionId?: string;
  parentSessionFile?: string;
  childSessionId?: string;
  childSessionFile?: string;
  ttlMs?: number;
}

export interface SubagentSpawnPreparation {
  /** Undo the preparation when the spawn failed after it. */
  rollback: () => void | Promise<void>;
}

export type SubagentEndReason = "deleted" | "completed" | "swept" | "released";

export interface SubagentEndedParams {
  childSessionKey: string;
  reason: SubagentEndReason;
}

export interface ToolContent {
  type: "text";
  text: string;
}

export interface ToolResult {
  content: ToolContent[];
  details: Record<string, unknown>;
}

/** What OpenClaw hands a tool factory (OpenClawPluginToolContext, the fields we read). */
export interface ToolContext {
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  [k: string]: unknown;
}

export interface AgentTool {
  name: string;
  label: string;
  description: string;
  /** JSON Schema (TypeBox schemas are JSON Schema too). */
  parameters: Record<string, unknown>;
  execute(toolCallId: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<ToolResult>;
}

export type ToolFactory = (ctx: ToolContext) => AgentTool;

export interface PluginService {
  id: string;
  start?: (ctx?: unknown) => void | Promise<void>;
  stop?: (ctx?: unknown) => void | Promise<void>;
}

/** The context of a session hook (before_reset: the agent context; session_end: the session's). */
export interface HookContext {
  agentId?: string;
  sessionId?: string;
  sessionKey?: string;
  [k: string]: unknown;
}

export type HookHandler = (event: Record<string, unknown>, ctx: HookContext) => void | Promise<void>;

/** The slice of a commander Command the plugin's CLI uses (the host's program is one). */
export interface CliCommand {
  command(name: string): CliCommand;
  description(text: string): CliCommand;
  option(flags: string, description?: string): CliCommand;
  action(fn: (...args: any[]) => void | Promise<void>): CliCommand;
}

export interface CliDescriptor {
  name: string;
  description: string;
  hasSubcommands?: boolean;
}

/** One stored session as the host's `runtime.agent.session.listSessionEntries` lists it. */
export interface SessionEntrySummary {
  sessionKey: string;
  entry?: { sessionId?: unknown; updatedAt?: unknown; [k: string]: unknown };
}

/** The members of OpenClawPluginApi this plugin uses. */
export interface PluginApi {
  id?: string;
  /** How the host loads the plugin this time (OpenClaw 2026.9): "full", or "cli-metadata"
   * when it only collects CLI descriptors, among others. */
  registrationMode?: string;
  name?: string;
  pluginConfig?: Record<string, unknown>;
  /** The host's whole config (read for tool-name conflicts). */
  config?: unknown;
  on?: (hook: string, handler: HookHandler, opts?: { priority?: number; timeoutMs?: number }) => void;
  logger: PluginLogger;
  registerTool?: (tool: AgentTool | ToolFactory, opts?: { name?: string; names?: string[]; optional?: boolean }) => void;
  registerContextEngine?: (id: string, factory: (ctx?: unknown) => ContextEngine | Promise<ContextEngine>) => void;
  registerService?: (service: PluginService) => void;
  registerCli?: (
    registrar: (ctx: { program: CliCommand }) => void | Promise<void>,
    opts?: { descriptors?: CliDescriptor[]; commands?: string[] },
  ) => void;
  /** The host's plugin runtime (the parts read by `openclaw ovstream import`). */
  runtime?: {
    agent?: {
      session?: {
        listSessionEntries?: (params?: { agentId?: string; readOnly?: boolean }) => SessionEntrySummary[];
      };
    };
  };
}
