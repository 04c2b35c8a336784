/**
 * Secrets (and, opted in, personal data) masked in a turn before it is published: the secret
 * never leaves the gateway's host (not in Redis, not in the spool on disk).
 *
 * The twin of the service's `core/redaction` (Python), from one rule file: the build copies
 * `core/redaction/rules.json` beside this module, and both are tested against one table
 * (`tests/redaction/cases.json`). A match becomes a typed placeholder, `<redacted:jwt#1>`,
 * numbered per kind within a session (one value, one number, while this process lives), never
 * holding the value. A placeholder already in a text is left as it is. Policy `drop` replaces
 * the content of a message holding one with a notice; `off` leaves the turn as it is.
 */

import { createHmac, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";

export type RedactionMode = "mask" | "drop" | "off";
export const REDACTION_MODES: readonly RedactionMode[] = ["mask", "drop", "off"];

export interface RuleSpec {
  kind: string;
  class?: string;
  pattern: string;
  flags?: string;
  group?: number;
  validator?: string;
  hints?: string[];
}

export interface Rule {
  kind: string;
  ruleClass: "secret" | "personal";
  regex: RegExp;
  group: number;
  validator?: (text: string) => boolean;
  /** Lowercase strings one of which a text holds whenever the pattern can match it (none: always tried). */
  hints: string[];
}

/** A placeholder a redaction wrote (never matched again): a shape OV's own privacy extraction leaves alone. */
const PLACEHOLDER = /<redacted:[a-z0-9_]{1,40}#[0-9]{1,6}>/g;
/** Keys of a message whose values are structure (or an image's bytes), never what someone said. */
const SKIPPED_KEYS = new Set([
  "role", "type", "id", "toolCallId", "toolUseId", "name", "toolName", "mimeType", "stopReason", "api",
  "provider", "model", "timestamp", "data", "tool_id", "tool_name", "tool_status", "image_url", "context_type",
  "created_at", "peer_id", "turn_id", "uri",
]);
const PLACEHOLDERS_KEPT = 2000;
const SESSIONS_KEPT = 512;
const KIND = /^[a-z0-9_]{1,40}$/;

export function luhn(digits: string): boolean {
  const numbers = [...digits].filter((c) => c >= "0" && c <= "9").map(Number);
  if (numbers.length < 13 || numbers.length > 19) return false;
  let total = 0;
  numbers.reverse().forEach((n, i) => {
    total += i % 2 ? (n * 2 > 9 ? n * 2 - 9 : n * 2) : n;
  });
  return total % 10 === 0;
}

export function iban(text: string): boolean {
  const compact = text.replaceAll(" ", "");
  if (compact.length < 15 || compact.length > 34) return false;
  const moved = compact.slice(4) + compact.slice(0, 4);
  let rest = 0;
  for (const c of moved) {
    for (const d of String(parseInt(c, 36))) rest = (rest * 10 + Number(d)) % 97;
  }
  return rest === 1;
}

const VALIDATORS: Record<string, (text: string) => boolean> = { luhn, iban };

/** A rule as the rule file (or the config's redactionCustomPatterns) writes it; throws on a bad one. */
export function compileRule(spec: RuleSpec): Rule {
  if (typeof spec.kind !== "string" || !KIND.test(spec.kind)) throw new Error(`redaction rule kind ${JSON.stringify(spec.kind)}: use 1-40 of a-z, 0-9, _`);
  if (typeof spec.pattern !== "string") throw new Error(`redaction rule ${spec.kind}: pattern must be a string`);
  if (spec.validator !== undefined && !(spec.validator in VALIDATORS)) throw new Error(`redaction rule ${spec.kind}: unknown validator ${spec.validator}`);
  return {
    kind: spec.kind,
    ruleClass: spec.class === "personal" ? "personal" : "secret",
    // d: the indices of the group masked
    regex: new RegExp(spec.pattern, `gd${(spec.flags ?? "").includes("i") ? "i" : ""}`),
    group: spec.group ?? 0,
    validator: spec.validator ? VALIDATORS[spec.validator] : undefined,
    hints: (spec.hints ?? []).map((h) => h.toLowerCase()),
  };
}

let bundled: Rule[] | undefined;

/** The rules of the rule file copied beside this module at build, in order. */
export function bundledRules(): Rule[] {
  bundled ??= (JSON.parse(readFileSync(new URL("./redaction-rules.json", import.meta.url), "utf8")) as { rules: RuleSpec[] }).rules.map(compileRule);
  return bundled;
}

export function personalKinds(): string[] {
  return bundledRules().filter((r) => r.ruleClass === "personal").map((r) => r.kind);
}

/** Rules, in order, with one regular expression finding every hint of theirs in one pass. */
export interface RuleSet {
  rules: Rule[];
  hints: RegExp | undefined;
  /** A hint -> the hints it holds (itself too): found, each of those counts as found. */
  within: Map<string, string[]>;
}

export function ruleSet(rules: Rule[]): RuleSet {
  const hints = [...new Set(rules.flatMap((r) => r.hints))].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
  const escape = (h: string) => h.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&");
  const within = new Map(hints.map((h) => [h, hints.filter((o) => h.includes(o))]));
  return { rules, hints: hints.length ? new RegExp(hints.map(escape).join("|"), "gi") : undefined, within };
}

export interface Policy {
  mode: RedactionMode;
  rules: RuleSet;
}

export function policyOf(mode: RedactionMode, personal: readonly string[], custom: readonly RuleSpec[]): Policy {
  const rules = bundledRules().filter((r) => r.ruleClass === "secret" || personal.includes(r.kind));
  return { mode, rules: ruleSet([...rules, ...custom.map((c) => compileRule({ ...c, class: "secret" }))]) };
}

/** Numbers per kind within one scope: one value, one number; values kept only as keyed digests. */
export class Placeholders {
  private readonly key = randomBytes(16);
  private readonly numbers = new Map<string, number>();
  private readonly counts = new Map<string, number>();

  of(rule: Rule, value: string): string {
    if (this.numbers.size >= PLACEHOLDERS_KEPT) {
      this.numbers.clear();
      this.counts.clear();
    }
    const digest = createHmac("sha256", this.key).update(`${rule.kind}\0${value}`).digest("base64");
    let number = this.numbers.get(digest);
    if (number === undefined) {
      number = (this.counts.get(rule.kind) ?? 0) + 1;
      this.counts.set(rule.kind, number);
      this.numbers.set(digest, number);
    }
    return `<redacted:${rule.kind}#${number}>`;
  }
}

type Span = [number, number, Rule];

function spans(text: string, set: RuleSet): Span[] {
  const present = new Set<string>();
  if (set.hints) for (const m of text.matchAll(set.hints)) for (const h of set.within.get(m[0].toLowerCase()) ?? []) present.add(h);
  const found: Span[] = [];
  for (const rule of set.rules) {
    if (rule.hints.length && !rule.hints.some((h) => present.has(h))) continue;
    for (const match of text.matchAll(rule.regex)) {
      const indices = match.indices?.[rule.group] ?? match.indices?.[0];
      if (!indices) continue;
      const [start, end] = indices;
      if (end <= start || (rule.validator && !rule.validator(text.slice(start, end)))) continue;
      found.push([start, end, rule]);
    }
  }
  if (found.length === 0) return found;
  const protectedSpans = [...text.matchAll(PLACEHOLDER)].map((m) => [m.index, m.index + m[0].length] as const);
  found.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const kept: Span[] = [];
  for (const span of found) {
    const [start, end] = span;
    const last = kept[kept.length - 1];
    if (last && start < last[1]) continue;
    if (protectedSpans.some(([ps, pe]) => start < pe && ps < end)) continue;
    kept.push(span);
  }
  return kept;
}

/** `text` with every match masked, and the kinds masked (counted). */
export function redactText(text: string, rules: RuleSet | Rule[], placeholders: Placeholders): [string, Map<string, number>] {
  const kinds = new Map<string, number>();
  const found = spans(text, Array.isArray(rules) ? ruleSet(rules) : rules);
  if (found.length === 0) return [text, kinds];
  let out = "";
  let at = 0;
  for (const [start, end, rule] of found) {
    out += text.slice(at, start) + placeholders.of(rule, text.slice(start, end));
    kinds.set(rule.kind, (kinds.get(rule.kind) ?? 0) + 1);
    at = end;
  }
  return [out + text.slice(at), kinds];
}

function walk(value: unknown, rules: RuleSet, placeholders: Placeholders, kinds: Map<string, number>): unknown {
  if (typeof value === "string") {
    const [redacted, found] = redactText(value, rules, placeholders);
    for (const [k, n] of found) kinds.set(k, (kinds.get(k) ?? 0) + n);
    return redacted;
  }
  if (Array.isArray(value)) return value.map((v) => walk(v, rules, placeholders, kinds));
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = SKIPPED_KEYS.has(k) ? v : walk(v, rules, placeholders, kinds);
    return out;
  }
  return value;
}

/** Every text the messages carry redacted by `policy`; the kinds found. Unchanged messages stay the same objects. */
export function redactMessages<T extends object>(messages: readonly T[], policy: Policy, placeholders: Placeholders): [T[], Map<string, number>] {
  const total = new Map<string, number>();
  if (policy.mode === "off") return [[...messages], total];
  const out = messages.map((message) => {
    const kinds = new Map<string, number>();
    const redacted = walk(message, policy.rules, placeholders, kinds) as T;
    if (kinds.size === 0) return message;
    for (const [k, n] of kinds) total.set(k, (total.get(k) ?? 0) + n);
    if (policy.mode === "drop") return withheld(message, kinds);
    return redacted;
  });
  return [out, total];
}

function withheld<T extends object>(message: T, kinds: Map<string, number>): T {
  const kept = Object.fromEntries(Object.entries(message).filter(([k]) => SKIPPED_KEYS.has(k)));
  const notice = `[message withheld: it held ${[...kinds.keys()].sort().join(", ")}]`;
  return { ...kept, content: [{ type: "text", text: notice }] } as T;
}

/** One `Placeholders` per session (the most recently used `SESSIONS_KEPT`), so a value keeps its number. */
export class SessionPlaceholders {
  private readonly sessions = new Map<string, Placeholders>();

  of(session: string): Placeholders {
    let found = this.sessions.get(session);
    if (found) {
      this.sessions.delete(session);
    } else {
      found = new Placeholders();
      if (this.sessions.size >= SESSIONS_KEPT) this.sessions.delete(this.sessions.keys().next().value as string);
    }
    this.sessions.set(session, found);
    return found;
  }
}

export interface RedactionSettings {
  redaction: RedactionMode;
  redactionAgents: Record<string, RedactionMode>;
  redactionPersonal: readonly string[];
  redactionCustomPatterns: readonly RuleSpec[];
}

/**
 * The plugin's redaction of turns: each agent's policy, each session's numbering. afterTurn
 * hands over the whole transcript each turn, mostly the same message objects as the turn
 * before: each object's redaction is remembered (weakly, per policy), so a turn costs what is
 * new in it.
 */
export class TurnRedactor {
  private readonly policies = new Map<RedactionMode, { policy: Policy; done: WeakMap<object, object> }>();
  private readonly placeholders = new SessionPlaceholders();

  constructor(private readonly settings: RedactionSettings) {}

  /** `messages` of a turn of `session` redacted by its agent's policy; the kinds masked in those new to it. */
  redact<T extends object>(session: string, agentId: string | null | undefined, messages: readonly T[]): [T[], Map<string, number>] {
    const mode = this.settings.redactionAgents[agentId ?? ""] ?? this.settings.redaction;
    let known = this.policies.get(mode);
    if (!known) {
      known = { policy: policyOf(mode, this.settings.redactionPersonal, this.settings.redactionCustomPatterns), done: new WeakMap() };
      this.policies.set(mode, known);
    }
    const { policy, done } = known;
    if (policy.mode === "off") return [[...messages], new Map()];
    const fresh = messages.filter((m) => !done.has(m));
    const [redacted, kinds] = redactMessages(fresh, policy, this.placeholders.of(session));
    fresh.forEach((m, i) => done.set(m, redacted[i] as object));
    return [messages.map((m) => done.get(m) as T), kinds];
  }
}
