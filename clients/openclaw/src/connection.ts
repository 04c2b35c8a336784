/**
 * The publisher's connection to Redis: one server (`createClient`) or a Redis Cluster
 * (`createCluster`, seeded with the one URL; each command goes to the node of its key's
 * slot, and a turn's XADD and last-turn SET share the `{s<n>}` hash tag, so one node).
 * Or the master Redis Sentinels name (`createSentinel`: they are asked where it is on every
 * connect, and a failover they run shows here as a broken connection the publisher opens
 * again). Either way the publisher sees the same small `RedisConnection`.
 */

import { readFileSync } from "node:fs";
import { connect as tlsConnect } from "node:tls";

import { createClient, createCluster, createSentinel } from "redis";

import type { PluginLogger } from "./types.js";

export interface RedisTlsFiles {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

export interface RedisConnection {
  readonly isReady: boolean;
  /** One command, sent to the server (or cluster node) holding `key`. */
  send(key: string, args: string[]): Promise<unknown>;
  close(): Promise<void>;
  destroy(): void;
}

export interface ConnectionOptions {
  url: string;
  cluster?: boolean;
  /** host:port of Sentinels, and the master's name there: redisUrl then gives only db, credentials, TLS. */
  sentinels?: { addresses: string[]; masterName: string };
  tls?: RedisTlsFiles;
  connectTimeoutMs: number;
  logger: PluginLogger;
}

/** A connected `RedisConnection`; rejects (nothing left open) when Redis cannot be reached. */
export async function openConnection(opts: ConnectionOptions): Promise<RedisConnection> {
  await tlsPreflight(opts.url, opts.tls, opts.connectTimeoutMs);
  const socket = {
    // The publisher reconnects itself, with its own backoff and buffer.
    reconnectStrategy: false,
    connectTimeout: opts.connectTimeoutMs,
    ...redisTlsSocket(opts.url, opts.tls),
  } as never;
  const connection = opts.sentinels?.addresses.length
    ? sentinelConnection(opts.url, opts.sentinels.addresses, opts.sentinels.masterName, socket)
    : opts.cluster
      ? clusterConnection(opts.url, socket)
      : singleConnection(opts.url, socket);
  // Without a listener an 'error' event would crash the host process.
  connection.client.on("error", (err: unknown) => {
    opts.logger.debug?.(`ovstream: redis client error: ${err instanceof Error ? err.message : String(err)}`);
  });
  try {
    await connection.client.connect();
  } catch (err) {
    safeDestroy(connection);
    throw err;
  }
  return connection;
}

interface Connected extends RedisConnection {
  client: { on(event: "error", listener: (err: unknown) => void): unknown; connect(): Promise<unknown> };
}

function singleConnection(url: string, socket: never): Connected {
  const client = createClient({ url, disableOfflineQueue: true, socket });
  return {
    client,
    get isReady() {
      return client.isReady;
    },
    send: (_key, args) => client.sendCommand(args),
    close: () => client.close(),
    destroy: () => client.destroy(),
  };
}

function clusterConnection(url: string, socket: never): Connected {
  // (a url in the defaults would send every node's connection to the seed)
  const client = createCluster({ rootNodes: [{ url }], defaults: { disableOfflineQueue: true, socket } });
  return {
    client,
    get isReady() {
      return client.isOpen;
    },
    send: (key, args) => client.sendCommand(key, false, args),
    close: () => client.close(),
    destroy: () => client.destroy(),
  };
}

function sentinelConnection(url: string, addresses: string[], name: string, socket: never): Connected {
  const parsed = new URL(url);
  const database = Number(parsed.pathname.replace(/^\//, "") || 0);
  const client = createSentinel({
    name,
    sentinelRootNodes: addresses.map((address) => {
      const at = address.lastIndexOf(":");
      return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
    }),
    nodeClientOptions: {
      username: decodeURIComponent(parsed.username) || undefined,
      password: decodeURIComponent(parsed.password) || undefined,
      database,
      disableOfflineQueue: true,
      socket,
    },
    // One connection to the master: a WAIT (publishReplicas) must follow its writes on it.
    masterPoolSize: 1,
  });
  return {
    client,
    get isReady() {
      return client.isReady;
    },
    send: (_key, args) => client.sendCommand(false, args),
    close: () => client.close(),
    destroy: () => void client.destroy().catch(() => undefined),
  };
}

/** destroy() throws on a client that is not open; here that is never an error. */
export function safeDestroy(connection: RedisConnection): void {
  try {
    connection.destroy();
  } catch {
    // already closed
  }
}

/**
 * For a rediss:// URL: one TLS connection of our own that must answer PING before node-redis
 * connects. A Redis that refuses the client (no or a wrong client certificate: TLS 1.3
 * says so only after the handshake) resets the connection twice, and node-redis 5 listens
 * for one socket error only: the second would be an uncaught exception in the host.
 */
async function tlsPreflight(url: string, files: RedisTlsFiles | undefined, timeoutMs: number): Promise<void> {
  if (!url.startsWith("rediss://")) return;
  const parsed = new URL(url);
  const options = redisTlsSocket(url, files);
  await new Promise<void>((resolve, reject) => {
    const socket = tlsConnect({
      host: parsed.hostname,
      port: Number(parsed.port || 6379),
      servername: parsed.hostname,
      ca: options.ca as Buffer | undefined,
      cert: options.cert as Buffer | undefined,
      key: options.key as Buffer | undefined,
    });
    const finish = (err?: Error) => {
      clearTimeout(timer);
      socket.removeAllListeners("data");
      socket.on("error", () => undefined);  // whatever else the dying socket says
      socket.destroy();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => finish(new Error(`TLS check of ${parsed.host} timed out`)), timeoutMs);
    let reply = "";
    socket.on("error", (err) => finish(err));
    socket.once("secureConnect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk: Buffer) => {
      reply += chunk.toString();
      if (reply.includes("\r\n")) finish();  // +PONG, or -NOAUTH (node-redis authenticates)
    });
  });
}

/** node-redis socket options for a rediss:// URL (files read once per connection). */
export function redisTlsSocket(url: string, files: RedisTlsFiles | undefined): Record<string, unknown> {
  if (!url.startsWith("rediss://")) return {};
  const socket: Record<string, unknown> = { tls: true };
  if (files?.caFile) socket.ca = readFileSync(files.caFile);
  if (files?.certFile) socket.cert = readFileSync(files.certFile);
  if (files?.keyFile) socket.key = readFileSync(files.keyFile);
  return socket;
}
