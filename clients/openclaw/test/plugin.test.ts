import assert from "node:assert/strict";
import { describe, it } from "node:test";

import plugin, { registerOvstream } from "../src/index.js";
import { quietRegistration, SAID_ONCE } from "../src/registration.js";
import { FakeApi } from "./helpers/fakes.js";

describe("plugin entry", () => {
  it("is a context-engine plugin object with a config schema OpenClaw can use", () => {
    assert.equal(plugin.id, "ovstream");
    assert.equal(plugin.kind, "context-engine");
    assert.equal(typeof plugin.register, "function");
    assert.equal((plugin.configSchema.jsonSchema as { type: string }).type, "object");
    assert.equal(plugin.configSchema.safeParse({ shards: 2 }).success, true);
    const bad = plugin.configSchema.safeParse({ shards: "many" });
    assert.equal(bad.success, false);
    assert.match(JSON.stringify(bad), /shards must be a number/);
  });

  it("registers the engine, the tools and a service whose stop() closes the publisher", async () => {
    const api = new FakeApi({ redisUrl: "redis://127.0.0.1:1/0" });
    plugin.register(api);
    assert.deepEqual([...api.engines.keys()], ["ovstream"]);
    assert.equal(api.tools.length, 8);
    assert.equal(api.services.length, 1);
    // Each factory call makes a fresh engine over the shared runtime.
    const e1 = await api.engine();
    const e2 = await api.engine();
    assert.notEqual(e1, e2);
    await e1.dispose();
    await api.services[0]!.stop!();
    assert.ok(api.logger.at("info").some((m) => m.includes('registered context engine "ovstream" and 8 tools')));
  });

  it("registers nothing, and says why, when the config is invalid", () => {
    const api = new FakeApi({ redisUrl: "http://not-redis" });
    assert.equal(registerOvstream(api), undefined);
    assert.equal(api.engines.size, 0);
    assert.equal(api.tools.length, 0);
    assert.ok(api.logger.at("error").some((m) => m.includes("redisUrl must be a redis")));
  });

  it("connects to nothing at registration (Redis is dialled on the first turn)", async () => {
    const api = new FakeApi({});
    const rt = registerOvstream(api)!;
    assert.equal(rt.publisher.getStats().connected, false);
    assert.equal(rt.publisher.getStats().failures, 0);
    await rt.close(10);
  });

  it("redacts the Redis password in its log line", () => {
    const api = new FakeApi({ redisUrl: "redis://user:secret@127.0.0.1:6379/0" });
    const rt = registerOvstream(api)!;
    assert.ok(!api.logger.lines.some((l) => l.message.includes("secret")));
    void rt.close(10);
  });
});

describe("what a registration says", () => {
  it("says its registration line once a process, and nothing while the host collects CLI descriptors", async () => {
    SAID_ONCE.clear();
    const metadata = new FakeApi({ redisUrl: "redis://127.0.0.1:1/0" });
    metadata.registrationMode = "cli-metadata";
    const first = registerOvstream(metadata)!;
    assert.ok(!metadata.logger.lines.some((l) => l.message.includes("registered context engine")));
    const full = [new FakeApi({ redisUrl: "redis://127.0.0.1:1/0" }), new FakeApi({ redisUrl: "redis://127.0.0.1:1/0" })];
    const runtimes = full.map((api) => registerOvstream(api)!);
    const said = full.flatMap((api) => api.logger.at("info").filter((m) => m.includes("registered context engine")));
    assert.equal(said.length, 1, said.join("\n")); // the host loads the plugin twice: one line
    await Promise.all([first, ...runtimes].map((rt) => rt.close(10)));
  });

  it("keeps quiet in its own CLI command, not in the gateway or doctor", () => {
    const api = new FakeApi({});
    assert.equal(quietRegistration(api, ["node", "openclaw", "ovstream", "import", "--dry-run"]), true);
    assert.equal(quietRegistration(api, ["node", "openclaw", "gateway", "run"]), false);
    assert.equal(quietRegistration(api, ["node", "openclaw", "doctor"]), false);
    api.registrationMode = "cli-metadata";
    assert.equal(quietRegistration(api, ["node", "openclaw", "doctor"]), true);
  });
});
