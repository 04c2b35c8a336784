import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { compileSessionGlob, isBypassed, ovSessionId, pyStrip, resolveSessionKey, sha256Hex } from "../src/ids.js";
import { PACKAGE_ROOT, pythonHasModule, runPython } from "./helpers/proc.js";

interface IdCase {
  sessionId: string;
  sessionKey: string | null;
  expect?: string;
  expectSha?: string;
  error?: boolean;
}
interface BypassCase {
  patterns: string[];
  sessionId: string;
  sessionKey: string | null;
  expect: boolean;
}

const table = JSON.parse(readFileSync(join(PACKAGE_ROOT, "test", "fixtures", "ids-cases.json"), "utf8")) as {
  sessionIds: IdCase[];
  bypass: BypassCase[];
};

function expected(c: IdCase): string | null {
  if (c.error) return null;
  if (c.expect !== undefined) return c.expect;
  return sha256Hex(c.expectSha ?? "");
}

function tsId(c: IdCase): string | null {
  try {
    return ovSessionId(c.sessionId, c.sessionKey);
  } catch {
    return null;
  }
}

describe("ovSessionId", () => {
  for (const [i, c] of table.sessionIds.entries()) {
    it(`case ${i}: ${JSON.stringify(c.sessionId)} / ${JSON.stringify(c.sessionKey)}`, () => {
      assert.equal(tsId(c), expected(c));
    });
  }

  it("pins the digests (encoding and salt cannot drift)", () => {
    assert.equal(
      ovSessionId("x", "agent:main:telegram:123"),
      "062d87cd30e068a70b1231273256767191ff73b54e35e3cda3ab11d4866d4467",
    );
    assert.equal(
      ovSessionId("C:\\Users\\test", null),
      "80277646b849cd6b15cf1b8e0ccd7bec51f6c7a34c1cc21d0cad8a8995ac8e6a",
    );
  });

  it("throws without a usable id", () => {
    assert.throws(() => ovSessionId("", undefined), /sessionId or sessionKey/);
    assert.throws(() => ovSessionId(undefined, "  "), /sessionId or sessionKey/);
  });

  it("strips Python's whitespace set, not JavaScript's", () => {
    assert.equal(pyStrip("\u001c a \u0085"), "a");
    assert.equal(pyStrip("\ufeffa"), "\ufeffa");
  });
});

describe("bypass globs", () => {
  for (const [i, c] of table.bypass.entries()) {
    it(`case ${i}: ${JSON.stringify(c.patterns)} on ${JSON.stringify(c.sessionKey ?? c.sessionId)}`, () => {
      assert.equal(isBypassed(c.patterns, c.sessionId, c.sessionKey), c.expect);
    });
  }

  it("compiles `*` to one segment and `**` to anything", () => {
    assert.ok(compileSessionGlob("a:*:c").test("a:b:c"));
    assert.ok(!compileSessionGlob("a:*:c").test("a:b:x:c"));
    assert.ok(compileSessionGlob("a:**:c").test("a:b:x:c"));
  });
});

describe("resolveSessionKey", () => {
  it("prefers the parameter, then runtimeContext.sessionKey", () => {
    assert.equal(resolveSessionKey({ sessionKey: "k", runtimeContext: { sessionKey: "r" } }), "k");
    assert.equal(resolveSessionKey({ sessionKey: "  ", runtimeContext: { sessionKey: "r" } }), "r");
    assert.equal(resolveSessionKey({ runtimeContext: { sessionKey: 5 } }), undefined);
    assert.equal(resolveSessionKey({}), undefined);
  });
});

describe("cross-check with core/ids.py", () => {
  const available = pythonHasModule("core.ids");
  it("gives the same OV id and bypass decision as the Python side for every case", { skip: available ? false : "core/ids.py (or the venv python) is not available" }, () => {
    const code = `
import json, sys
from core.ids import ov_session_id, is_bypassed
t = json.load(sys.stdin)
ids = []
for c in t["sessionIds"]:
    try:
        ids.append(ov_session_id(c["sessionId"], c["sessionKey"]))
    except ValueError:
        ids.append(None)
byp = [is_bypassed(c["patterns"], c["sessionId"], c["sessionKey"]) for c in t["bypass"]]
json.dump({"ids": ids, "bypass": byp}, sys.stdout)
`;
    const py = runPython<{ ids: (string | null)[]; bypass: boolean[] }>(code, table);
    assert.deepEqual(py.ids, table.sessionIds.map(tsId));
    assert.deepEqual(
      py.bypass,
      table.bypass.map((c) => isBypassed(c.patterns, c.sessionId, c.sessionKey)),
    );
  });
});
