// What the plugin's afterTurn does before the publisher takes the event (build it, redact it,
// encode it), timed with redaction off and on (mask), for sessions growing to TURNS turns, each
// call given the whole transcript as OpenClaw gives it. Run by bench/redaction_cost.py.
//     node bench/redaction_plugin.mjs [turns] [tool_kib]
import { performance } from "node:perf_hooks";

const dist = new URL("../clients/openclaw/dist/src/", import.meta.url);
const { buildTurnEvent, encodeTurnEvent } = await import(new URL("events.js", dist));
const { TurnRedactor } = await import(new URL("redaction.js", dist));

const turns = Number(process.argv[2] ?? 60);
const kib = Number(process.argv[3] ?? 16);
const sessions = 10;
const AWS = "AKIA" + "IOSFODNN7EXAMPLE";

function toolOutput(turn) {
  let out = "";
  for (let i = 0; out.length < kib * 1024; i++) out += `2026-12-06 08:41:07 INFO build step ${i + turn}: compiled src/module_${i}.py in 0.${i}s (cache hit)\n`;
  return out;
}

function turnMessages(i) {
  const pasted = i % 10 === 9 ? ` Use the key ${AWS}.` : "";
  return [
    { role: "user", content: `Turn ${i}: run the build and tell me what failed.${pasted}` },
    { role: "assistant", content: [{ type: "toolCall", id: `call-${i}`, name: "shell", arguments: { cmd: "make build" } }] },
    { role: "toolResult", toolCallId: `call-${i}`, content: [{ type: "text", text: toolOutput(i) }] },
    { role: "assistant", content: [{ type: "text", text: `Turn ${i}: the build passed.` }] },
  ];
}

function run(mode) {
  const redactor = new TurnRedactor({ redaction: mode, redactionAgents: {}, redactionPersonal: [], redactionCustomPatterns: [] });
  const transcripts = Array.from({ length: sessions }, () => []);
  let spent = 0;
  let calls = 0;
  for (let t = 0; t < turns; t++) {
    for (let s = 0; s < sessions; s++) {
      transcripts[s].push(...turnMessages(t));
      const started = performance.now();
      const event = buildTurnEvent({ sessionId: `bench-${s}`, messages: transcripts[s], prePromptMessageCount: transcripts[s].length - 4 });
      event.messages = redactor.redact(`bench-${s}`, null, event.messages)[0];
      encodeTurnEvent(event);
      spent += performance.now() - started;
      calls += 1;
    }
  }
  return spent / calls;
}

const times = { off: [], mask: [] };
for (let r = 0; r < 3; r++) for (const mode of ["off", "mask"]) times[mode].push(run(mode));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const [off, mask] = [median(times.off), median(times.mask)];
console.log(`plugin: ${sessions} sessions x ${turns} turns (a ${kib} KiB tool result a turn), each afterTurn given the whole transcript`);
console.log(`  ms per afterTurn (build, redact, encode): off ${times.off.map((t) => t.toFixed(3)).join(" ")}; mask ${times.mask.map((t) => t.toFixed(3)).join(" ")}`);
console.log(`  median: off ${off.toFixed(3)} ms, mask ${mask.toFixed(3)} ms: mask/off ${(mask / off).toFixed(3)}x`);
