/**
 * The character-weighted token estimate (as core/messages/tokens.py and OpenViking):
 * 1.5 per CJK code point (ideographs incl. the astral extension planes, kana,
 * Hangul, CJK punctuation, fullwidth forms), 2 per other code point above
 * U+FFFF, 0.25 for everything else; the sum rounded up. Used for the
 * estimatedTokens of a pass-through assemble, when the RPC cannot answer.
 */

function isCjk(cp: number): boolean {
  return (
    (cp >= 0x1100 && cp <= 0x11ff) ||
    (cp >= 0x3000 && cp <= 0x303f) ||
    (cp >= 0x3040 && cp <= 0x30ff) ||
    (cp >= 0x3130 && cp <= 0x318f) ||
    (cp >= 0x31f0 && cp <= 0x31ff) ||
    (cp >= 0x3400 && cp <= 0x4dbf) ||
    (cp >= 0x4e00 && cp <= 0x9fff) ||
    (cp >= 0xac00 && cp <= 0xd7af) ||
    (cp >= 0xf900 && cp <= 0xfaff) ||
    (cp >= 0xff00 && cp <= 0xffef) ||
    (cp >= 0x20000 && cp <= 0x2ebef)
  );
}

// Counted in quarter tokens to stay in integers.
export function estimateTokens(text: string | null | undefined): number {
  if (!text) {
    return 0;
  }
  let units = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0) ?? 0;
    if (cp < 0x80) {
      units += 1;
    } else if (isCjk(cp)) {
      units += 6;
    } else if (cp > 0xffff) {
      units += 8;
    } else {
      units += 1;
    }
  }
  return Math.ceil(units / 4);
}

/** Estimated tokens of messages (or any JSON value) as JSON.stringify writes them. */
export function estimateMessageTokens(value: unknown): number {
  if (value === null || value === undefined) {
    return 0;
  }
  if (typeof value === "string") {
    return estimateTokens(value);
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch {
    return 0;
  }
  return estimateTokens(json ?? "");
}
