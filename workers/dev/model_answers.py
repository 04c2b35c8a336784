"""Deterministic answers to OpenViking 0.5.2's LLM prompts (used by ``workers.dev.model_server``).

Prompts recognised (read in openviking's source, confirmed by logging real requests):

- Phase-2 memory extraction (``session/memory/extract_loop.py``): a system message with
  the "restricted Python memory SDK" contract, then a user message "## Conversation
  History" whose lines are ``[i][role][speaker]: text``; existing memories arrive as
  JSON records with an ``object_name``. Answer: a program such as
  ``sdk.create_preferences(user=<"default">, topic=<"dark_roast_coffee">,
  content=<"- I prefer dark roast coffee.">)`` (each <...> a triple-quoted string), then
  ``sdk.commit()``. Only methods the
  prompt lists are used; an existing object with the same identity is updated instead.
- Working memory creation (``compression.ov_wm_v2``): ``<session_content>`` with
  ``[role]: text`` lines. Answer: the 7-section markdown document. With the
  ``create_working_memory`` tool offered (checkpoints) the same document goes in a tool call.
- Working memory update (``compression.ov_wm_v2_update``, tool ``update_working_memory``):
  per-section ops (UPDATE Current State, APPEND Key Facts, KEEP the rest).
- Memory patch merge (``session/memory/patch_merge_context_provider.py``: OV merging
  overlapping extractions of one user): every patch carried through
  (``workers.dev.merge_answers``).
- Anything else (directory overviews, abstracts, ...): ``Summary: <first sentence>``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workers.dev.merge_answers import is_merge_prompt, merge_program

AnswerT = tuple[str, str, list[tuple[str, dict[str, Any]]]]

WM_SECTIONS = (
    ("Session Title", "_A short and distinctive 5-10 word descriptive title for the session. Info-dense, no filler._"),
    (
        "Current State",
        "_2-5 sentences MAX: What is the latest status? What is unresolved or "
        "pending? Immediate next steps. NOT a fact dump._",
    ),
    (
        "Task & Goals",
        "_What is the purpose or topic of this conversation? Key objectives, design "
        "decisions, or context that frames the discussion._",
    ),
    (
        "Key Facts & Decisions",
        "_Stable facts about the user's world: conclusions, relationships, "
        "preferences, constraints, technical choices with rationale, "
        "commitments, dates, quantities. One bullet per fact._",
    ),
    (
        "Files & Context",
        "_Referenced resources that future answers may depend on: file paths, "
        "document links, key URLs — each with why it matters. Omit bulk "
        "media/search dumps._",
    ),
    (
        "Errors & Corrections",
        "_Mistakes, misunderstandings, or failed approaches — and how they "
        "were corrected. User corrections to assistant's assumptions._",
    ),
    ("Open Issues", "_Unresolved questions, blockers, follow-ups, risks, or topics to revisit._"),
)

EXTRACTION_MARKER = "restricted Python memory SDK"
PREFERENCE_USER = "default"

_PREF_RE = re.compile(
    r"\b(i\s+(?:really\s+|strongly\s+|usually\s+|always\s+)?(?:prefer|like|love|enjoy|hate|dislike"
    r"|avoid|want|use)|i'm\s+allergic|i\s+am\s+allergic|my\s+favou?rite)\b|我(?:更|最)?(?:喜欢|偏好|爱)",
    re.IGNORECASE,
)
_PROFILE_RE = re.compile(
    r"\b(my\s+name\s+is|i\s+live\s+in|i\s+work\s+(?:as|at)|i\s+am\s+a|i'm\s+a)\b|我叫|我住在", re.IGNORECASE
)
_CONV_LINE_RE = re.compile(r"^\[(\d+)\]\[([a-z_]+)\]\[[^\]]*\]:\s?(.*)$")
_WM_LINE_RE = re.compile(r"^\[(user|assistant|system|tool)\]:\s?(.*)$")
_STOP = {
    "i",
    "a",
    "an",
    "the",
    "my",
    "to",
    "of",
    "in",
    "on",
    "at",
    "for",
    "and",
    "or",
    "with",
    "is",
    "am",
    "are",
    "be",
    "it",
    "that",
    "this",
    "when",
    "really",
    "strongly",
    "usually",
    "always",
    "prefer",
    "like",
    "love",
    "enjoy",
    "hate",
    "dislike",
    "avoid",
    "want",
    "use",
    "favorite",
    "favourite",
    "m",
    "allergic",
    "very",
    "much",
    "over",
    "than",
    "me",
    "so",
}
_SENTENCE_RE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.findall(text) if s.strip()]


def first_sentence(text: str, limit: int = 200) -> str:
    found = sentences(text)
    return (found[0] if found else text.strip())[:limit]


def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AnswerT:
    """-> (kind, content, [(tool_name, arguments)]) for one chat request."""
    texts = [content_text(m.get("content")) for m in messages]
    joined = "\n".join(texts)
    tool_names = {t.get("function", {}).get("name") for t in tools if isinstance(t, dict)}
    if is_merge_prompt(joined):
        return "merge", merge_program(texts, _existing(texts), _lit), []
    if EXTRACTION_MARKER in joined:
        return "extraction", extraction_program(texts), []
    if "update_working_memory" in tool_names or ("<current_wm>" in joined and "<new_content>" in joined):
        return "wm_update", "", [("update_working_memory", wm_update_args(joined))]
    if "<session_content>" in joined and "Working Memory" in joined:
        doc = wm_document(_wm_lines(joined, "session_content"))
        if "create_working_memory" in tool_names:
            args = {"working_memory": doc, "checkpoint_summaries": _checkpoints(joined)}
            return "wm_create", "", [("create_working_memory", args)]
        return "wm_create", doc, []
    last_user = next(
        (t for m, t in zip(reversed(messages), reversed(texts)) if m.get("role") == "user" and t.strip()), joined
    )
    return "other", "Summary: " + first_sentence(last_user), []


# --- working memory -------------------------------------------------------------------


def _wm_lines(prompt: str, tag: str) -> list[tuple[str, str]]:
    m = re.search(rf"<{tag}>\n?(.*?)</{tag}>", prompt, re.DOTALL)
    body = m.group(1) if m else ""
    out: list[tuple[str, str]] = []
    for line in body.splitlines():
        hit = _WM_LINE_RE.match(line.strip())
        if hit:
            out.append((hit.group(1), hit.group(2)))
        elif out and line.strip() and not line.lstrip().startswith("<"):
            out[-1] = (out[-1][0], out[-1][1] + " " + line.strip())
    return out


def _summary_items(lines: list[tuple[str, str]], limit: int = 40) -> list[str]:
    """One "role: sentence" item per sentence of each message (at most ``limit``)."""
    items = [f"{role}: {s[:200]}" for role, text in lines for s in sentences(text)]
    return items[:limit]


def wm_document(lines: list[tuple[str, str]]) -> str:
    items = _summary_items(lines)
    user_sentences = [s for r, t in lines if r == "user" for s in sentences(t)]
    # the first that says something: a greeting ("Hi!") names no session
    user_first = next((s for s in user_sentences if len(s.split()) >= 4), None) or next(
        iter(user_sentences), "conversation"
    )
    title = " ".join(user_first.split()[:8]).rstrip(".")
    body = {
        "Session Title": title,
        "Current State": "Summary: " + " ".join(first_sentence(t) for _, t in lines if t.strip()),
        "Task & Goals": f"- {user_first}",
        "Key Facts & Decisions": "\n".join(f"- {i}" for i in items) or "- (none)",
        "Files & Context": "- (none)",
        "Errors & Corrections": "- (none)",
        "Open Issues": "- (none)",
    }
    parts = ["# Working Memory", ""]
    for name, desc in WM_SECTIONS:
        parts += [f"## {name}", desc, body[name], ""]
    return "\n".join(parts).rstrip() + "\n"


def wm_update_args(prompt: str) -> dict[str, Any]:
    lines = _wm_lines(prompt, "new_content")
    ops: dict[str, Any] = {name: {"op": "KEEP"} for name, _ in WM_SECTIONS}
    if lines:
        state = "Summary: " + " ".join(first_sentence(t) for _, t in lines if t.strip())
        ops["Current State"] = {"op": "UPDATE", "content": f"{dict(WM_SECTIONS)['Current State']}\n{state}"}
        ops["Key Facts & Decisions"] = {"op": "APPEND", "items": _summary_items(lines)}
    args: dict[str, Any] = {"sections": ops}
    if "checkpoint_source" in prompt:
        args["checkpoint_summaries"] = _checkpoints(prompt)
    return args


def _checkpoints(prompt: str) -> list[str]:
    m = re.search(r"checkpoint_source blocks indexed 0 through (\d+)", prompt)
    if not m:
        return []
    return [f"Checkpoint {i}: conversation continued." for i in range(int(m.group(1)) + 1)]


# --- phase-2 memory extraction --------------------------------------------------------


def _conversation(texts: list[str]) -> list[tuple[str, str]]:
    """[(role, text)] from the "## Conversation History" message."""
    convo = next((t for t in texts if "## Conversation History" in t), "")
    out: list[tuple[str, str]] = []
    for line in convo.splitlines():
        hit = _CONV_LINE_RE.match(line)
        if hit:
            out.append((hit.group(2), hit.group(3)))
        elif out and line.strip() and not line.startswith("After exploring"):
            out[-1] = (out[-1][0], out[-1][1] + " " + line.strip())
        elif line.startswith("After exploring"):
            break
    return out


def _existing(texts: list[str]) -> list[dict[str, Any]]:
    """Existing-memory records the prompt binds (``{"object_name", "memory_type", "fields"}``)."""
    found = []
    for t in texts:
        start = t.find("{")
        if "object_name" not in t or start < 0:
            continue
        try:
            record = json.loads(t[start:])
        except ValueError:
            continue
        if isinstance(record, dict) and "object_name" in record:
            found.append(record)
    return found


def topic_of(sentence: str) -> str:
    words = [w for w in re.findall(r"[a-z0-9]+", sentence.lower()) if w not in _STOP]
    if words:
        return "_".join(words[:3])
    cjk = re.sub(r"[^\u4e00-\u9fff]", "", sentence.replace("我", "").replace("喜欢", ""))
    return cjk[:6] or "general"


def _lit(text: str) -> str:
    """A triple-quoted literal that survives any text."""
    safe = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if safe.endswith('"'):
        safe = safe[:-1] + '\\"'
    return f'"""{safe}"""'


def extraction_program(texts: list[str]) -> str:
    system = texts[0] if texts else ""
    can_pref = "sdk.create_preferences(" in system
    can_profile = "sdk.set_profile(" in system
    existing = _existing(texts)
    prefs: dict[str, list[str]] = {}
    profile: list[str] = []
    for role, text in _conversation(texts):
        if role != "user":
            continue
        for s in sentences(text):
            if can_pref and _PREF_RE.search(s):
                prefs.setdefault(topic_of(s), []).append(s)
            elif can_profile and _PROFILE_RE.search(s):
                profile.append(s)
    lines: list[str] = []
    for topic, said in prefs.items():
        content = "\n".join(f"- {s}" for s in said)
        bound = next(
            (
                r
                for r in existing
                if r.get("memory_type") == "preferences" and str(r.get("fields", {}).get("topic", "")).lower() == topic
            ),
            None,
        )
        if bound is None:
            lines.append(
                f"sdk.create_preferences(user={_lit(PREFERENCE_USER)}, topic={_lit(topic)}, content={_lit(content)})"
            )
            continue
        old = str(bound.get("fields", {}).get("content", "")).rstrip()
        new = [f"- {s}" for s in said if s not in old]
        if new:
            merged = (old + "\n" if old else "") + "\n".join(new)
            lines.append(f"{bound['object_name']}.content.update({_lit(merged)})")
    if profile:
        bound = next((r for r in existing if r.get("memory_type") == "profile"), None)
        facts = "\n".join(f"- {s}" for s in profile)
        if bound is None:
            lines.append(f"sdk.set_profile(content={_lit('# User' + chr(10) + facts)})")
        else:
            old = str(bound.get("fields", {}).get("content", "")).rstrip()
            new = [f"- {s}" for s in profile if s not in old]
            if new:
                merged = (old or "# User") + "\n" + "\n".join(new)
                lines.append(f"{bound['object_name']}.content.update({_lit(merged)})")
    lines.append("sdk.commit()")
    return "\n".join(lines)
