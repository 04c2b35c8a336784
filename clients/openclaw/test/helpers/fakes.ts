/**
 * Fakes of what surrounds the plugin: OpenClaw's plugin API (recording what
 * is registered), a logger that keeps its lines, and a tiny HTTP server
 * standing in for the ovstream RPC.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

import type { AgentTool, ContextEngine, PluginApi, PluginLogger, PluginService, ToolFactory } from "../../src/types.js";

export interface LogLine {
  level: "debug" | "info" | "warn" | "error";
  message: string;
}

export class MemoryLogger implements PluginLogger {
  readonly lines: LogLine[] = [];
  debug = (message: string) => void this.lines.push({ level: "debug", message });
  info = (message: string) => void this.lines.push({ level: "info", message });
  warn = (message: string) => void this.lines.push({ level: "warn", message });
  error = (message: string) => void this.lines.push({ level: "error", message });
  at(level: LogLine["level"]): string[] {
    return this.lines.filter((l) => l.level === level).map((l) => l.message);
  }
}

export class FakeApi implements PluginApi {
  readonly logger = new MemoryLogger();
  readonly tools: Array<{ tool: AgentTool | ToolFactory; opts?: { name?: string } }> = [];
  readonly engines = new Map<string, (ctx?: unknown) => ContextEngine | Promise<ContextEngine>>();
  readonly services: PluginService[] = [];
  registrationMode?: string;
  constructor(public pluginConfig?: Record<string, unknown>) {}
  registerTool = (tool: AgentTool | ToolFactory, opts?: { name?: string }) => {
    this.tools.push({ tool, opts });
  };
  registerContextEngine = (id: string, factory: (ctx?: unknown) => ContextEngine | Promise<ContextEngine>) => {
    this.engines.set(id, factory);
  };
  registerService = (service: PluginService) => {
    this.services.push(service);
  };
  async engine(id = "ovstream"): Promise<ContextEngine> {
    const factory = this.engines.get(id);
    if (!factory) throw new Error(`no engine ${id} registered`);
    return factory({});
  }
  tool(name: string, ctx: Record<string, unknown> = {}): AgentTool {
    const entry = this.tools.find((t) => t.opts?.name === name);
    if (!entry) throw new Error(`no tool ${name} registered`);
    return typeof entry.tool === "function" ? entry.tool(ctx) : entry.tool;
  }
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: unknown;
}

export type Handler = (req: RecordedRequest, res: ServerResponse) => void | Promise<void>;

/** An HTTP server recording every request; `handler` answers (or never does). */
export class FakeRpc {
  readonly requests: RecordedRequest[] = [];
  /** Connections opened to it: a client that gave up before its request was read still counts. */
  connections = 0;
  private server: Server | null = null;
  private readonly open = new Set<ServerResponse>();
  port = 0;

  constructor(public handler: Handler) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown = text;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch {
          // keep raw text
        }
        const rec: RecordedRequest = { method: req.method ?? "", path: req.url ?? "", headers: req.headers, body };
        this.requests.push(rec);
        this.open.add(res);
        res.on("close", () => this.open.delete(res));
        void this.handler(rec, res);
      });
    });
    this.server.on("connection", () => {
      this.connections += 1;
    });
    await new Promise<void>((res) => this.server!.listen(0, "127.0.0.1", () => res()));
    const addr = this.server.address();
    this.port = typeof addr === "object" && addr ? addr.port : 0;
    return this;
  }

  async stop(): Promise<void> {
    for (const res of this.open) res.destroy();
    const srv = this.server;
    this.server = null;
    if (srv) {
      srv.closeAllConnections();
      await new Promise<void>((res) => srv.close(() => res()));
    }
  }
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
