/**
 * The plugin's RPC calls over HTTPS with a private CA: Node trusts it through
 * NODE_EXTRA_CA_CERTS (read when the process starts, so the client runs in a child
 * process), the README's advice for a gateway; without it the call fails.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { makePki, pythonHasModule } from "./helpers/proc.js";

const RPC_MODULE = join(import.meta.dirname, "..", "src", "rpc.js");

/** The child runs while this process serves: never a sync spawn here. */
function call(url: string, env: NodeJS.ProcessEnv): Promise<{ status: number | null; out: string }> {
  const script = `
import { RpcClient } from ${JSON.stringify(RPC_MODULE)};
try {
  const answer = await new RpcClient({ baseUrl: ${JSON.stringify(url)}, token: "rpc-token" }).post("/v1/tools", {}, { timeoutMs: 5000 });
  console.log(JSON.stringify(answer));
} catch (err) { console.log("failed: " + err.message); process.exitCode = 3; }`;
  return new Promise((resolve) => {
    execFile(process.execPath, ["--input-type=module", "-e", script], { env, timeout: 20_000 }, (err, stdout, stderr) => {
      const status = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ status: typeof status === "number" ? status : 1, out: stdout + stderr });
    });
  });
}

describe("the RPC over HTTPS", { skip: pythonHasModule("trustme") ? false : "trustme (the test CA) not installed" }, () => {
  let server: Server | undefined;
  after(() => server?.close());

  it("works with the CA in NODE_EXTRA_CA_CERTS, and sends the token", async () => {
    const pki = makePki();
    const seen: string[] = [];
    server = createServer({ key: readFileSync(pki.keyFile), cert: readFileSync(pki.certFile) }, (req, res) => {
      seen.push(String(req.headers.authorization));
      res.writeHead(200, { "content-type": "application/json" }).end('{"ok": 1}');
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const { NODE_EXTRA_CA_CERTS: _ignored, ...env } = process.env;
    const trusted = await call(url, { ...env, NODE_EXTRA_CA_CERTS: pki.caFile });
    assert.equal(trusted.status, 0, trusted.out);
    assert.equal(trusted.out.trim(), '{"ok":1}');
    assert.deepEqual(seen, ["Bearer rpc-token"]);
    const untrusted = await call(url, env);
    assert.equal(untrusted.status, 3, untrusted.out);
    assert.match(untrusted.out, /failed: /);
  });
});
