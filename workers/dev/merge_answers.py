"""The dev model's answer to OpenViking 0.5.2's memory patch merge prompt (pure).

When one batch of OV's ``StreamingMemoryUpdater`` (keyed by account and user: OV merges the
phase 2s of one user's sessions that overlap) spans sessions, OV asks the model's "memory
patch merge agent" to reconcile the extractions
(``session/memory/streaming_memory_updater.py``, ``merge_one_memory_type_operations``; the
prompt is ``session/memory/patch_merge_context_provider.py``'s). The prompt is an
extraction loop's: the SDK contract with one memory type's write method, the bound existing
records, then ``# Memory File Patches``: each patch's fields as unified diffs
(``+`` lines what the patch writes). OV writes only what the answer's program writes, so an
answer of ``sdk.commit()`` alone loses every patch of the batch.

This answer carries each patch through as a model would: patches of the same identity (the
method's primary-key fields) become one memory whose content is the union of their lines; an
existing record of that identity is updated with the lines it lacks, else the memory is
created (``sdk.create_<type>``) or set (``sdk.set_<type>``).
"""

from __future__ import annotations

import re
from typing import Any

MERGE_MARKER = "You are a memory patch merge agent"
PATCHES_HEADER = "# Memory File Patches"

_METHOD_RE = re.compile(r"sdk\.(create|set)_(\w+)\(\*,\s*([^)]*)\)")
_IDENTITY_RE = re.compile(r"Identity fields \(primary key\):\s*([^.\n]*)")
_PATCH_RE = re.compile(r"^Patch \d+\s*$")
_FIELD_RE = re.compile(r"^  (\w+):\s*$")

Literal = Any
"""``(str) -> str``: how a string becomes a triple-quoted literal (model_answers._lit)."""


def is_merge_prompt(joined: str) -> bool:
    return MERGE_MARKER in joined and PATCHES_HEADER in joined


def patches(prompt: str) -> list[dict[str, str]]:
    """Each patch's fields as the patch writes them: the ``+`` and context lines of its diff."""
    body = prompt[prompt.find(PATCHES_HEADER) + len(PATCHES_HEADER) :]
    out: list[dict[str, list[str]]] = []
    field: str | None = None
    for line in body.splitlines():
        if _PATCH_RE.match(line):
            out.append({})
            field = None
        elif out and (hit := _FIELD_RE.match(line)):
            field = hit.group(1)
            out[-1][field] = []
        elif out and field is not None and line.startswith("    "):
            diff_line = line[4:]
            if diff_line.startswith(("+", " ")):
                out[-1][field].append(diff_line[1:])
    return [{name: "\n".join(lines) for name, lines in p.items()} for p in out]


def _method(system: str) -> tuple[str, str, list[str], list[str]] | None:
    """(verb, memory type, field names, identity fields) of the one write method offered."""
    hit = _METHOD_RE.search(system)
    if hit is None:
        return None
    verb, memory_type, params = hit.groups()
    fields = [p.split(":")[0].strip() for p in params.split(",") if p.strip()]
    ident = _IDENTITY_RE.search(system[hit.end() :])
    identity = [f.strip() for f in ident.group(1).split(",")] if ident and verb == "create" else []
    return verb, memory_type, fields, [f for f in identity if f in fields]


def _union(contents: list[str]) -> list[str]:
    """The lines of every content, each once, in the order first written."""
    return list(dict.fromkeys(line for c in contents for line in c.splitlines() if line.strip()))


def merge_program(texts: list[str], existing: list[dict[str, Any]], lit: Literal) -> str:
    """The SDK program carrying every patch of the prompt through (``existing``: the bound
    records, ``model_answers._existing``)."""
    method = _method(texts[0] if texts else "")
    prompt = next((t for t in texts if PATCHES_HEADER in t), "")
    if method is None:
        return "sdk.commit()"
    verb, memory_type, fields, identity = method
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for patch in patches(prompt):
        if patch.get("memory_type", memory_type) != memory_type:
            continue
        groups.setdefault(tuple(patch.get(f, "") for f in identity), []).append(patch)
    lines: list[str] = []
    for key, group in groups.items():
        content = _union([p.get("content", "") for p in group])
        bound = next(
            (
                r
                for r in existing
                if r.get("memory_type") == memory_type
                and tuple(str(r.get("fields", {}).get(f, "")) for f in identity) == key
            ),
            None,
        )
        if bound is not None:
            old = str(bound.get("fields", {}).get("content", "")).rstrip()
            new = [line for line in content if line not in old.splitlines()]
            if new:
                lines.append(f"{bound['object_name']}.content.update({lit(chr(10).join([old, *new]).strip())})")
            continue
        values = {**group[0], "content": "\n".join(content)}
        args = ", ".join(f"{f}={lit(values.get(f, ''))}" for f in fields)
        lines.append(f"sdk.{verb}_{memory_type}({args})")
    lines.append("sdk.commit()")
    return "\n".join(lines)
