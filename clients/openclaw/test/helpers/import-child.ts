/**
 * A process standing in for `openclaw ovstream import` in the host's CLI, run by
 * test/history.test.ts: it registers the plugin twice, each from its own copy of the
 * plugin's modules, as OpenClaw 2026.9.6 does for a plugin's command; runs the import action
 * of the last registration with the flags in argv[4] (JSON); and ends with nothing else to
 * do: the process must then exit by itself.
 *
 *   node import-child.js <redisUrl> <stateDir> <flags json>
 */

import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { registerOvstream } from "../../src/index.js";
import type { CliCommand, PluginApi } from "../../src/types.js";
import { MemoryLogger } from "./fakes.js";

const [redisUrl, stateDir, flagsJson] = process.argv.slice(2);
let importAction: ((flags: unknown) => Promise<void>) | undefined;

/** The host's command tree as far as the plugin uses it: keeps the import's action. */
function program(path: string): CliCommand {
  return {
    command: (name) => program(`${path} ${name}`.trim()),
    description: function () {
      return this;
    },
    option: function () {
      return this;
    },
    action: function (fn) {
      if (path === "ovstream import") importAction = fn as (flags: unknown) => Promise<void>;
      return this;
    },
  };
}

const api: PluginApi = {
  // rpcUrl: nothing listens there (a selection with no session asks the service nothing)
  pluginConfig: { redisUrl, stateDir, rpcUrl: "http://127.0.0.1:9", shards: 2 },
  logger: new MemoryLogger(),
  config: { agents: { list: [{ id: "main" }] } },
  runtime: { agent: { session: { listSessionEntries: () => [] } } },
  registerCli: (registrar) => void registrar({ program: program("") }),
};
registerOvstream(api);
// The second copy beside dist/src, so that it finds the same node_modules.
const dist = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const copy = mkdtempSync(join(dist, "module-copy-"));
try {
  cpSync(join(dist, "src"), copy, { recursive: true });
  const second = (await import(pathToFileURL(join(copy, "index.js")).href)) as { registerOvstream: typeof registerOvstream };
  second.registerOvstream(api);
} finally {
  rmSync(copy, { recursive: true, force: true });
}
if (!importAction) throw new Error("the plugin registered no `ovstream import` action");
await importAction(JSON.parse(flagsJson ?? "{}"));
process.stderr.write(`exitCode=${String(process.exitCode)}\n`);
