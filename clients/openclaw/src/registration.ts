/**
 * What a registration says, and when: the host registers the plugin more than once in one
 * process (twice at a gateway's start, again on a config reload, and a plugin command loads
 * it once to collect its CLI descriptors and once to run), so each line is said once a
 * process; and none where nobody needs it: the host collecting CLI descriptors
 * (`registrationMode: "cli-metadata"`), or `openclaw ovstream ...`, whose own output is what
 * its user reads (the gateway's tools and engine are not in play there).
 */

import type { PluginApi, PluginLogger } from "./types.js";

/**
 * Lines already said in this process. Kept on `globalThis`: the host loads the plugin's
 * modules afresh for a registration, so a module-level set would be a new, empty one each time.
 */
const SAID_ONCE_KEY = Symbol.for("ovstream.saidOnce");
const processGlobals = globalThis as typeof globalThis & { [SAID_ONCE_KEY]?: Set<string> };
export const SAID_ONCE: Set<string> = (processGlobals[SAID_ONCE_KEY] ??= new Set<string>());

/** The plugin's own CLI command word (`openclaw ovstream ...`). */
export const CLI_ROOT = "ovstream";

/** Whether this process runs `openclaw ovstream ...`: the first word that is no option. */
export function runningOwnCommand(argv: readonly string[] = process.argv): boolean {
  return argv.slice(2).find((word) => !word.startsWith("-")) === CLI_ROOT;
}

/** Whether this registration should keep its notes to itself (see the module's comment). */
export function quietRegistration(api: PluginApi, argv: readonly string[] = process.argv): boolean {
  return api.registrationMode === "cli-metadata" || runningOwnCommand(argv);
}

/** Say `message` at `level` once in this process. */
export function sayOnce(logger: PluginLogger, level: "info" | "warn", message: string): void {
  if (SAID_ONCE.has(message)) return;
  SAID_ONCE.add(message);
  logger[level](message);
}
