/**
 * JSON-over-HTTP calls to the ovstream RPC (global fetch), each bounded by a
 * timeout (AbortController) and optionally by the caller's AbortSignal.
 * Every call says the plugin's version (`X-Ovstream-Plugin`): an RPC that no longer
 * supports it answers 426 with what to do.
 */

import { ENGINE_VERSION, PLUGIN_VERSION_HEADER } from "./version.js";

export type RpcErrorKind = "timeout" | "aborted" | "network" | "http" | "invalid";

export class RpcError extends Error {
  override name = "RpcError";
  constructor(
    readonly kind: RpcErrorKind,
    message: string,
    readonly status = 0,
    readonly code?: string,
  ) {
    super(message);
  }
}

export interface RpcClientOptions {
  baseUrl: string;
  apiKey?: string;
  /** The RPC's own credential, sent as `Authorization: Bearer`. */
  token?: string;
  fetchImpl?: typeof fetch;
}

export interface CallOptions {
  timeoutMs: number;
  signal?: AbortSignal;
}

export class RpcClient {
  private readonly baseUrl: string;
  private readonly apiKey?: string;
  private readonly token?: string;
  private readonly fetchImpl: typeof fetch;

  constructor(options: RpcClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.token = options.token;
    this.fetchImpl = options.fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  async post<T>(path: string, body: unknown, options: CallOptions): Promise<T> {
    return this.call<T>("POST", path, body, options);
  }

  async get<T>(path: string, options: CallOptions): Promise<T> {
    return this.call<T>("GET", path, undefined, options);
  }

  private async call<T>(method: "GET" | "POST", path: string, body: unknown, options: CallOptions): Promise<T> {
    if (options.signal?.aborted) {
      throw new RpcError("aborted", "aborted by the caller");
    }
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, options.timeoutMs);
    const onAbort = () => controller.abort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json",
      [PLUGIN_VERSION_HEADER]: ENGINE_VERSION,
    };
    if (this.apiKey) {
      headers["x-openviking-api-key"] = this.apiKey;
    }
    if (this.token) {
      headers.authorization = `Bearer ${this.token}`;
    }
    const url = `${this.baseUrl}${path}`;
    try {
      let response: Response;
      let text: string;
      try {
        response = await this.fetchImpl(url, {
          method,
          headers,
          ...(method === "POST" ? { body: JSON.stringify(body) } : {}),
          signal: controller.signal,
        });
        text = await response.text();
      } catch (err) {
        if (timedOut) {
          throw new RpcError("timeout", `${method} ${path}: no answer within ${options.timeoutMs} ms`);
        }
        if (options.signal?.aborted) {
          throw new RpcError("aborted", `${method} ${path}: aborted by the caller`);
        }
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        const detail = cause?.code ?? cause?.message ?? (err as Error).message;
        throw new RpcError("network", `${method} ${url}: ${detail}`);
      }
      let parsed: unknown = undefined;
      if (text.length > 0) {
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
      }
      if (!response.ok) {
        const error = (parsed as { error?: { code?: string; message?: string; field?: string } } | undefined)?.error;
        const detail = error?.message ?? (text.slice(0, 300) || response.statusText);
        const field = error?.field ? ` (${error.field})` : "";
        throw new RpcError("http", `${method} ${path}: HTTP ${response.status}: ${detail}${field}`, response.status, error?.code);
      }
      if (parsed === undefined) {
        throw new RpcError("invalid", `${method} ${path}: the answer is not JSON`, response.status);
      }
      return parsed as T;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
    }
  }
}
