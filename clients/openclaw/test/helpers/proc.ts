/**
 * Processes and ports for the tests: free ports, a real redis-server, the
 * Python side. Every child started here is tracked and killed when the test
 * process exits, even if a test forgets to stop it.
 */

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { createClient } from "redis";

import { decodeTurnEvent } from "../../src/events.js";

/** clients/openclaw (the package root), from dist/test/helpers/. */
export const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
/** The ovstream repository root. */
export const REPO_ROOT = resolve(PACKAGE_ROOT, "..", "..");

/** Children started by the tests; `true` when the child leads its own process group. */
const children = new Map<ChildProcess, boolean>();

function killAll(): void {
  for (const [child, group] of children) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        if (group && child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
        else child.kill("SIGKILL");
      } catch {
        // gone
      }
    }
  }
}
process.on("exit", killAll);

/** Remember a child so it is killed when the test process exits, whatever happens. */
export function track(child: ChildProcess, options: { group?: boolean } = {}): ChildProcess {
  children.set(child, options.group === true);
  child.once("exit", () => children.delete(child));
  return child;
}

/** Stop a child: SIGTERM, then SIGKILL if it has not exited within graceMs. */
export async function stopChild(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  const exited = new Promise<void>((res) => child.once("exit", () => res()));
  child.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const killed = new Promise<void>((res) => {
    timer = setTimeout(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      res();
    }, graceMs);
  });
  await Promise.race([exited, killed]);
  clearTimeout(timer);
  await exited;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((res) => setTimeout(res, ms));
}

/** Poll `probe` until it returns a truthy value; fail after deadlineMs. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, deadlineMs = 30_000, everyMs = 50): Promise<T> {
  const until = Date.now() + deadlineMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value as T;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > until) {
      throw new Error(`timed out waiting for ${what}${lastError ? `: ${String(lastError)}` : ""}`);
    }
    await sleep(everyMs);
  }
}

/** One inline Redis command over a raw socket (no client library involved). */
export function redisPing(port: number): Promise<boolean> {
  return new Promise((res) => {
    const sock = new Socket();
    let buf = "";
    const done = (ok: boolean) => {
      sock.destroy();
      res(ok);
    };
    sock.setTimeout(1000, () => done(false));
    sock.once("error", () => done(false));
    sock.connect(port, "127.0.0.1", () => sock.write("PING\r\n"));
    sock.on("data", (d) => {
      buf += d.toString();
      if (buf.includes("\r\n")) done(buf.startsWith("+PONG"));
    });
  });
}

export interface RedisServer {
  port: number;
  url: string;
  stop(): Promise<void>;
}

export function redisServerPath(): string | undefined {
  const found = spawnSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" });
  const path = found.stdout.trim();
  return found.status === 0 && path ? path : undefined;
}

/** Start `redis-server --port N --save "" --appendonly no` and wait for PONG. */
export async function startRedis(port?: number): Promise<RedisServer> {
  const p = port ?? (await freePort());
  return launchRedis("redis-server", p, `redis://127.0.0.1:${p}/0`, ["--port", String(p), "--protected-mode", "no"], () => redisPing(p));
}

export interface RedisCluster {
  nodes: RedisServer[];
  /** A seed node's URL. */
  url: string;
  stop(): Promise<void>;
}

/** A free loopback port whose cluster bus port (+10000) is free too. */
async function clusterPort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 20_000 + Math.floor(Math.random() * 35_000);
    if ((await portFree(port)) && (await portFree(port + 10_000))) return port;
  }
  throw new Error("no free port pair for a cluster node");
}

function portFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => res(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => res(true)));
  });
}

/** `masters` cluster-enabled redis-servers joined by `redis-cli --cluster create`, no replicas. */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const nodes: RedisServer[] = [];
  for (let i = 0; i < masters; i++) {
    const p = await clusterPort();
    const args = ["--port", String(p), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"];
    nodes.push(await launchRedis("a cluster node", p, `redis://127.0.0.1:${p}`, args, () => redisPing(p)));
  }
  const stopAll = async () => {
    for (const node of nodes) await node.stop();
  };
  const created = spawnSync(
    "redis-cli",
    ["--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"],
    { encoding: "utf8", timeout: 60_000 },
  );
  if (created.status !== 0) {
    await stopAll();
    throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
  }
  await waitFor("cluster_state:ok on every node", () =>
    nodes.every((n) => spawnSync("redis-cli", ["-p", String(n.port), "cluster", "info"], { encoding: "utf8" }).stdout.includes("cluster_state:ok")),
  15_000, 50);
  return { nodes, url: nodes[0]!.url, stop: stopAll };
}

/**
 * `redis-server` on loopback port `port` with `args` (besides bind, persistence off and
 * a temp dir), ready once `ready()`; stopped (and its dir removed) by `stop()`.
 */
async function launchRedis(
  what: string, port: number, url: string, args: string[], ready: () => Promise<boolean>,
): Promise<RedisServer> {
  const exe = redisServerPath();
  if (!exe) {
    throw new Error("redis-server is not installed (apt-get install redis-server)");
  }
  const dir = mkdtempSync(join(tmpdir(), "ovstream-node-redis-"));
  const child = track(
    spawn(exe, [...args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
      stdio: ["ignore", "ignore", "pipe"],
    }),
  );
  let stderr = "";
  child.stderr?.on("data", (d) => (stderr += d.toString()));
  await waitFor(`${what} on port ${port}`, async () => {
    if (child.exitCode !== null) throw new Error(`redis-server exited ${child.exitCode}: ${stderr}`);
    return ready();
  }, 15_000, 25);
  return {
    port,
    url,
    async stop() {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A Sentinel watching the master on `masterPort` as `name` (quorum 1: it alone fails it over, 1 s after it stops answering). */
export async function startSentinel(masterPort: number, name: string): Promise<RedisServer> {
  const port = await freePort();
  const conf = join(mkdtempSync(join(tmpdir(), "ovstream-node-sentinel-")), "sentinel.conf");
  writeFileSync(
    conf,
    `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1\n` +
      `sentinel down-after-milliseconds ${name} 1000\nsentinel failover-timeout ${name} 3000\n`,
  );
  const server = await launchRedis("a Sentinel", port, `redis://127.0.0.1:${port}`, [conf, "--sentinel", "--port", String(port)], () => redisPing(port));
  return { ...server, stop: async () => { await server.stop(); rmSync(dirname(conf), { recursive: true, force: true }); } };
}

/** The turn events on a stream, oldest first (decoded as capture reads them). */
export async function streamEvents(url: string, key: string) {
  const client = createClient({ url });
  client.on("error", () => {});
  await client.connect();
  try {
    return (await client.xRange(key, "-", "+")).map((e) => decodeTurnEvent(String(e.message.e)));
  } finally {
    await client.close();
  }
}

/** The venv python, from OVSTREAM_PYTHON or <repo>/.venv/bin/python. */
export function pythonPath(): string | undefined {
  const fromEnv = process.env.OVSTREAM_PYTHON;
  if (fromEnv) return existsSync(fromEnv) ? fromEnv : undefined;
  const venv = join(REPO_ROOT, ".venv", "bin", "python");
  return existsSync(venv) ? venv : undefined;
}

/**
 * Whether `import <module>` works in the repo's python (the Python side exists).
 * With OVSTREAM_REQUIRE_PYTHON=1 (./test sets it) a missing module throws instead,
 * so a renamed Python module can never turn a cross-check into a silent skip.
 */
export function pythonHasModule(module: string): boolean {
  const py = pythonPath();
  const ok = py !== undefined &&
    spawnSync(py, ["-c", `import ${module}`], { cwd: REPO_ROOT, env: pythonEnv(), encoding: "utf8" }).status === 0;
  if (!ok && process.env.OVSTREAM_REQUIRE_PYTHON === "1") {
    throw new Error(`the Python module ${module} is not importable (OVSTREAM_REQUIRE_PYTHON=1)`);
  }
  return ok;
}

export function pythonEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  env.PYTHONPATH = env.PYTHONPATH ? `${REPO_ROOT}:${env.PYTHONPATH}` : REPO_ROOT;
  return env;
}

/**
 * Run a Python snippet in the repo with `input` as JSON on stdin; the snippet
 * prints one JSON document, which is returned.
 */
export function runPython<T = unknown>(code: string, input: unknown): T {
  const py = pythonPath();
  if (!py) throw new Error("no python found (set OVSTREAM_PYTHON)");
  const r = spawnSync(py, ["-c", code], {
    cwd: REPO_ROOT,
    env: pythonEnv(),
    input: JSON.stringify(input),
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0) {
    throw new Error(`python failed (${r.status}): ${r.stderr}`);
  }
  return JSON.parse(r.stdout) as T;
}

export interface TlsFiles {
  caFile: string;
  certFile: string;
  keyFile: string;
  clientCertFile: string;
  clientKeyFile: string;
}

/** A private CA, a server certificate for 127.0.0.1 and a client certificate (trustme, through Python). */
export function makePki(): TlsFiles {
  const dir = mkdtempSync(join(tmpdir(), "ovstream-pki-"));
  runPython("import json, sys, pathlib; from tests.helpers.tls import make_pki; make_pki(pathlib.Path(json.load(sys.stdin))); print(\"null\")", dir);
  return {
    caFile: join(dir, "ca.pem"),
    certFile: join(dir, "server.pem"),
    keyFile: join(dir, "server.key"),
    clientCertFile: join(dir, "client.pem"),
    clientKeyFile: join(dir, "client.key"),
  };
}

/** `redis-server` on a TLS-only port that requires client certificates; `url` is rediss://. */
export async function startTlsRedis(pki: TlsFiles): Promise<RedisServer> {
  const p = await freePort();
  const args = [
    "--port", "0", "--tls-port", String(p),
    "--tls-cert-file", pki.certFile, "--tls-key-file", pki.keyFile, "--tls-ca-cert-file", pki.caFile,
    "--tls-auth-clients", "yes",
  ];
  return launchRedis("TLS redis-server", p, `rediss://127.0.0.1:${p}/0`, args, () => portOpen(p));
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((res) => {
    const sock = new Socket();
    sock.once("error", () => res(false));
    sock.connect(port, "127.0.0.1", () => {
      sock.destroy();
      res(true);
    });
  });
}
