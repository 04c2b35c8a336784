// Runs the plugin's own import (clients/openclaw/dist/src/history.js) over a synthetic host of
// SESSIONS stored sessions of MESSAGES messages each, against a running ovstream; prints its
// summary and seconds as JSON. Driven by bench/import_history.py.
//   node bench/import_driver.mjs REDIS_URL RPC_URL KEY_PREFIX SESSIONS MESSAGES [RATE]
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { serviceLoad } from "../clients/openclaw/dist/src/cli.js";
import { parseConfig } from "../clients/openclaw/dist/src/config.js";
import { IMPORT_DEFAULTS, importHistory } from "../clients/openclaw/dist/src/history.js";
import { PluginRuntime } from "../clients/openclaw/dist/src/runtime.js";

const [redisUrl, rpcUrl, keyPrefix, sessions, messages, rate] = process.argv.slice(2);
const quiet = { info() {}, warn: (m) => process.stderr.write(`${m}\n`), error: (m) => process.stderr.write(`${m}\n`) };
const config = parseConfig({ redisUrl, rpcUrl, keyPrefix, stateDir: mkdtempSync(join(tmpdir(), "ovstream-import-")) });
const rt = new PluginRuntime(config, quiet);
const stored = Array.from({ length: Number(sessions) }, (_, i) => ({
  agentId: "main",
  sessionKey: `agent:main:history-${i}`,
  sessionId: `history-${i}`,
  updatedAt: Date.now() - 86_400_000,
}));
const host = {
  agents: () => ["main"],
  list: () => stored,
  read: async (s) =>
    Array.from({ length: Number(messages) }, (_, n) =>
      n % 2 === 0
        ? { role: "user", content: `${s.sessionId} says thing ${n}: ` + "words ".repeat(30) }
        : { role: "assistant", content: [{ type: "text", text: `${s.sessionId} answers ${n}: ` + "words ".repeat(60) }] },
    ),
};
const started = Date.now();
const summary = await importHistory(
  { rate: Number(rate ?? IMPORT_DEFAULTS.rate), maxBacklog: IMPORT_DEFAULTS.maxBacklog, maxCommits: IMPORT_DEFAULTS.maxCommits, dryRun: false },
  { host, rt, load: serviceLoad(rt) },
);
await rt.close(10_000);
process.stdout.write(`${JSON.stringify({ ...summary, seconds: (Date.now() - started) / 1000 })}\n`);
