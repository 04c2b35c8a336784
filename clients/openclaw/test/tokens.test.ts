import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { estimateMessageTokens, estimateTokens } from "../src/tokens.js";
import { pythonHasModule, runPython } from "./helpers/proc.js";

describe("estimateTokens", () => {
  it("weighs ASCII 0.25, CJK 1.5, other astral 2, rounded up", () => {
    assert.equal(estimateTokens(""), 0);
    assert.equal(estimateTokens("abcd"), 1);
    assert.equal(estimateTokens("abcde"), 2);
    assert.equal(estimateTokens("中文"), 3);
    assert.equal(estimateTokens("😀"), 2);
    assert.equal(estimateTokens("é"), 1);
    assert.equal(estimateTokens("\u{20000}"), 2); // CJK extension B: 1.5 -> 2
    assert.equal(estimateTokens("ｱ"), 2); // halfwidth katakana (U+FF71) is in the fullwidth block
  });

  it("estimates messages over their JSON", () => {
    const msgs = [{ role: "user", content: "hello" }];
    assert.equal(estimateMessageTokens(msgs), estimateTokens(JSON.stringify(msgs)));
    assert.equal(estimateMessageTokens(null), 0);
    assert.equal(estimateMessageTokens("abcd"), 1);
  });
});

describe("cross-check with core/messages/tokens.py", () => {
  const available = pythonHasModule("core.messages.tokens");
  it("agrees with estimate_message_tokens", { skip: available ? false : "core/messages/tokens.py not available" }, () => {
    const values: unknown[] = [
      "plain text",
      "混合 text 和 emoji 😀😀 and ｶﾀｶﾅ",
      [{ role: "user", content: "第一个问题 with ascii" }, { role: "assistant", content: [{ type: "text", text: "한국어 답변" }] }],
      { nested: { list: [1, 2, 3], s: "\u3000\u1100\u31f0" } },
      "",
    ];
    const code = `
import json, sys
from core.messages.tokens import estimate_message_tokens
json.dump([estimate_message_tokens(v) for v in json.load(sys.stdin)], sys.stdout)
`;
    assert.deepEqual(runPython<number[]>(code, values), values.map(estimateMessageTokens));
  });
});
