import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import { registerOvstream } from "../src/index.js";
import type { PluginRuntime } from "../src/runtime.js";
import { SAID_ONCE, TOOL_NAMES, TOOL_SPECS } from "../src/tools.js";
import { FakeApi, FakeRpc, json } from "./helpers/fakes.js";
import { freePort, pythonHasModule, runPython } from "./helpers/proc.js";

const EXPECTED = [
  "memory_recall",
  "memory_store",
  "memory_forget",
  "add_resource",
  "add_skill",
  "memory_search",
  "ov_archive_search",
  "ov_archive_expand",
];

describe("tool registration", () => {
  const runtimes: PluginRuntime[] = [];
  const servers: FakeRpc[] = [];
  after(async () => {
    for (const rt of runtimes) await rt.close(50);
    for (const s of servers) await s.stop();
  });

  it("registers the eight tools as factories with object schemas", () => {
    const api = new FakeApi({});
    const rt = registerOvstream(api)!;
    runtimes.push(rt);
    assert.deepEqual(api.tools.map((t) => t.opts?.name), EXPECTED);
    assert.deepEqual([...TOOL_NAMES], EXPECTED);
    for (const name of EXPECTED) {
      const tool = api.tool(name, { sessionId: "s" });
      assert.equal(tool.name, name);
      assert.ok(tool.description.length > 20);
      assert.equal(tool.parameters.type, "object");
      assert.equal(typeof tool.execute, "function");
    }
  });

  it("says the memory_search name collision once per process, though the host registers it again and again", () => {
    SAID_ONCE.clear();
    const said: string[] = [];
    for (let i = 0; i < 4; i++) {  // gateway start (twice), then a config reload (twice)
      const api = new FakeApi({});
      runtimes.push(registerOvstream(api)!);
      said.push(...api.logger.at("warn").filter((m) => m.includes("is also registered by memory-core")));
    }
    assert.equal(said.length, 1, said.join("\n"));
  });

  it("posts {sessionId, sessionKey, runtimeContext, params} and returns the RPC's {content, details}", async () => {
    const rpc = await new FakeRpc((req, res) =>
      json(res, 200, { content: [{ type: "text", text: `ran ${req.path}` }], details: { action: "found", n: 2 } }),
    ).start();
    servers.push(rpc);
    const api = new FakeApi({ rpcUrl: rpc.url });
    runtimes.push(registerOvstream(api)!);
    const tool = api.tool("memory_recall", { sessionId: "sid-1", sessionKey: "agent:main:x", agentId: "main" });
    const result = await tool.execute("call-1", { query: "paris", limit: 3 });
    assert.deepEqual(result, { content: [{ type: "text", text: "ran /v1/tools/memory_recall" }], details: { action: "found", n: 2 } });
    assert.deepEqual(rpc.requests[0]!.body, {
      sessionId: "sid-1",
      sessionKey: "agent:main:x",
      runtimeContext: { agentId: "main", sessionKey: "agent:main:x" },
      params: { query: "paris", limit: 3 },
    });
  });

  it("turns RPC errors into a readable tool result instead of throwing", async () => {
    const rpc = await new FakeRpc((_req, res) =>
      json(res, 422, { error: { code: "invalid_params", message: "query: field required", field: "params.query" } }),
    ).start();
    servers.push(rpc);
    const api = new FakeApi({ rpcUrl: rpc.url });
    runtimes.push(registerOvstream(api)!);
    const result = await api.tool("memory_search", { sessionId: "s" }).execute("c", {});
    assert.match(result.content[0]!.text, /memory_search failed: .*HTTP 422: query: field required \(params\.query\)/);
    assert.equal(result.details.status, 422);

    const down = new FakeApi({ rpcUrl: `http://127.0.0.1:${await freePort()}` });
    runtimes.push(registerOvstream(down)!);
    const r2 = await down.tool("ov_archive_expand", { sessionId: "s" }).execute("c", { archiveId: "archive_001" });
    assert.match(r2.content[0]!.text, /ov_archive_expand failed/);
    assert.equal(r2.details.action, "error");
  });

  it("skips the RPC for a bypassed session", async () => {
    const rpc = await new FakeRpc((_req, res) => json(res, 200, { content: [], details: {} })).start();
    servers.push(rpc);
    const api = new FakeApi({ rpcUrl: rpc.url, bypassSessionPatterns: ["agent:*:cron:**"] });
    runtimes.push(registerOvstream(api)!);
    const r = await api.tool("memory_store", { sessionKey: "agent:a:cron:1" }).execute("c", { text: "x" });
    assert.equal(r.details.reason, "session_bypassed");
    assert.equal(rpc.requests.length, 0);
  });
});

describe("tool schemas agree with workers/rpc/models.py", () => {
  const available = pythonHasModule("workers.rpc.models");
  it("every schema property is a field the RPC accepts, and required fields match", { skip: available ? false : "workers/rpc/models.py not available" }, () => {
    const code = `
import json, sys
from pydantic import AliasChoices
from workers.rpc import models as m
models = {
  "memory_recall": m.MemoryRecallParams, "memory_store": m.MemoryStoreParams,
  "memory_forget": m.MemoryForgetParams, "add_resource": m.AddResourceParams,
  "add_skill": m.AddSkillParams, "memory_search": m.MemorySearchParams,
  "ov_archive_search": m.ArchiveSearchParams, "ov_archive_expand": m.ArchiveExpandParams,
}
out = {}
for tool, model in models.items():
    accepted, required = [], []
    for name, f in model.model_fields.items():
        names = [name]
        if isinstance(f.validation_alias, AliasChoices):
            names = [c for c in f.validation_alias.choices if isinstance(c, str)]
        elif isinstance(f.validation_alias, str):
            names = [f.validation_alias]
        accepted += names
        if f.is_required():
            required.append(name)
    out[tool] = {"accepted": accepted, "required": sorted(required)}
json.dump(out, sys.stdout)
`;
    const py = runPython<Record<string, { accepted: string[]; required: string[] }>>(code, null);
    for (const spec of TOOL_SPECS) {
      const model = py[spec.name];
      assert.ok(model, `no params model for ${spec.name}`);
      const props = Object.keys(spec.parameters.properties as Record<string, unknown>);
      for (const p of props) {
        assert.ok(model.accepted.includes(p), `${spec.name}.${p} is not accepted by the RPC (${model.accepted.join(", ")})`);
      }
      const required = ((spec.parameters.required as string[] | undefined) ?? []).slice().sort();
      assert.deepEqual(required, model.required, `${spec.name} required fields`);
    }
  });
});
