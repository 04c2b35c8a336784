"""Search, content, filesystem, resources, skills and admin routes of the OV fake.

A mixin of ``workers.dev.fake_ov.app.FakeOV`` (which owns auth, state and dispatch).
``find`` scores leaves by word overlap (0..1). Like 0.5.2 it also returns, whatever
the query, a level-1 hit ``<dir>/.overview.md`` scoring 0.5 for every directory
holding content in scope, plus (fake only) a level-0 ``<root>/.abstract.md`` for
each content root: callers must keep level 2.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workers.dev.fake_ov.state import (
    Ctx,
    Entry,
    FakeError,
    Req,
    canonical_uri,
    invalid,
    new_id,
)
from workers.dev.fake_ov.store import FakeStore
from workers.dev.fake_ov.uris import context_type_of, lexical_score, under, uri_parts

FIND_FIELDS = frozenset(
    {
        "query",
        "image_url",
        "target_uri",
        "context_type",
        "limit",
        "node_limit",
        "score_threshold",
        "filter",
        "include_provenance",
        "tags",
        "since",
        "until",
        "time_field",
        "level",
        "read_content",
        "telemetry",
        "events_time_decay_protection",
    }
)
CONTEXT_TYPES = {
    "memory": "memory",
    "memories": "memory",
    "resource": "resource",
    "resources": "resource",
    "skill": "skill",
    "skills": "skill",
}
_BUCKET = {"memory": "memories", "resource": "resources", "skill": "skills"}


def reject_unknown(body: dict[str, Any], allowed: frozenset[str]) -> None:
    extra = sorted(set(body) - allowed)
    if extra:
        raise invalid(f"Extra inputs are not permitted: {', '.join(extra)}", extra[0])


def require_str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise invalid("Field required", key)
    return value


DIRECTORY_SCORE = 0.5


def _tags(uri: str) -> list[str]:
    """``memory_type=<category>`` on memory leaves, as 0.5.2 tags them."""
    parts = uri_parts(uri)
    if context_type_of(uri) != "memory" or "memories" not in parts:
        return []
    rest = parts[parts.index("memories") + 1 :]
    kind = rest[0] if len(rest) > 1 else (rest[0].rsplit(".", 1)[0] if rest else "")
    return [f"memory_type={kind}"] if kind else []


def _directories(entries: list[Entry], targets: list[str]) -> list[dict[str, Any]]:
    """Hits for the directories (inside ``targets``) holding ``entries``; see the module docstring."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        parts = uri_parts(e.uri)
        root_at = next((i for i, p in enumerate(parts) if p in ("memories", "resources", "skills")), 0)
        root = "viking://" + "/".join(parts[: root_at + 1])
        out.setdefault(
            root + "/.abstract.md", {"uri": root + "/.abstract.md", "level": 0, "context_type": e.context_type}
        )
        for depth in range(root_at + 1, len(parts)):
            d = "viking://" + "/".join(parts[:depth])
            out.setdefault(
                d + "/.overview.md", {"uri": d + "/.overview.md", "level": 1, "context_type": e.context_type}
            )
    dirs = [(uri.rsplit("/", 1)[0], h) for uri, h in sorted(out.items())]
    return [
        {**h, "score": DIRECTORY_SCORE, "abstract": f"Directory {d}", "tags": []}
        for d, h in dirs
        if any(under(d, t) for t in targets)
    ]


def leaf_name(path: str) -> str:
    name = path.rstrip("/").rsplit("/", 1)[-1] or "resource"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


class ContentRoutes(FakeStore):
    """Route handlers ``_r_<name>`` and seeding helpers; see workers.dev.fake_ov.app."""

    # --- seeding and inspection -------------------------------------------------------

    def seed_memory(
        self,
        text: str,
        *,
        uri: str | None = None,
        abstract: str | None = None,
        overview: str = "",
        account: str = "default",
        user: str = "default",
        peer: str | None = None,
        category: str = "preferences",
    ) -> str:
        """Store a memory (level 2 leaf) and return its URI."""
        if uri is None:
            root = f"viking://user/{user}/peers/{peer}/memories" if peer else f"viking://user/{user}/memories"
            uri = f"{root}/{category}/mem_{self.next_seq()}.md"
        self.entries.setdefault(account, {})[uri] = Entry(uri, text, abstract or text[:200], overview)
        return uri

    def seed_resource(self, text: str, *, uri: str, abstract: str | None = None, account: str = "default") -> str:
        self.entries.setdefault(account, {})[uri] = Entry(uri, text, abstract or text[:200])
        return uri

    def memories(self, account: str = "default", user: str = "default", peer: str | None = None) -> list[Entry]:
        """Memories of a user (or of one of its peers), oldest first."""
        root = f"viking://user/{user}/peers/{peer}/memories" if peer else f"viking://user/{user}/memories"
        return [e for e in self.entries.get(account, {}).values() if under(e.uri, root)]

    # --- visibility -------------------------------------------------------------------

    @staticmethod
    def _visible(ctx: Ctx, uri: str) -> bool:
        parts = uri_parts(uri)
        if parts[:1] in (["resources"], ["agent"]):
            return True
        if parts[:2] != ["user", ctx.user]:
            return False
        return not (ctx.peer and len(parts) > 3 and parts[2] == "peers" and parts[3] != ctx.peer)

    def _target(self, ctx: Ctx, uri: Any, field_name: str = "uri") -> str:
        target = canonical_uri(uri, ctx.user, field_name=field_name)
        parts = uri_parts(target)
        if len(parts) >= 2 and parts[0] == "user" and parts[1] != ctx.user:
            raise FakeError("PERMISSION_DENIED", f"Access denied for {target}", {"resource": target})
        return target

    def _visible_entries(self, ctx: Ctx) -> list[Entry]:
        return [e for e in self.entries.get(ctx.account, {}).values() if self._visible(ctx, e.uri)]

    # --- search -----------------------------------------------------------------------

    def _r_find(self, r: Req) -> dict[str, Any]:
        body = r.body()
        reject_unknown(body, FIND_FIELDS)
        query = body.get("query", "")
        limit = body.get("node_limit") or body.get("limit", 10)
        if not isinstance(query, str) or not isinstance(limit, int) or limit < 1:
            raise invalid("query must be a string and limit an integer >= 1", "limit")
        threshold = body.get("score_threshold")
        raw_targets = body.get("target_uri") or ""
        raw_targets = raw_targets if isinstance(raw_targets, list) else [raw_targets]
        targets = [self._target(r.ctx, t, "target_uri") for t in raw_targets if t] or ["viking://"]
        wanted = body.get("context_type")
        wanted = None if wanted is None else ([wanted] if isinstance(wanted, str) else wanted)
        if wanted is not None and any(w not in CONTEXT_TYPES for w in wanted):
            raise FakeError("INVALID_ARGUMENT", f"invalid context_type: {wanted}")
        kinds = None if wanted is None else {CONTEXT_TYPES[w] for w in wanted}
        in_scope = [
            e
            for e in self._visible_entries(r.ctx)
            if any(under(e.uri, t) for t in targets) and not (kinds and e.context_type not in kinds)
        ]
        scored = []
        for e in in_scope:
            score = lexical_score(query, f"{e.abstract}\n{e.content}")
            if score > 0 and (threshold is None or score >= threshold):
                scored.append((score, e))
        scored.sort(key=lambda se: (-se[0], se[1].uri))
        hits: list[dict[str, Any]] = [
            {
                "context_type": e.context_type,
                "uri": e.uri,
                "level": 2,
                "score": s,
                "abstract": e.abstract,
                "tags": _tags(e.uri),
            }
            for s, e in scored[:limit]
        ]
        if threshold is None or threshold <= DIRECTORY_SCORE:
            hits += _directories(in_scope, targets)
        hits.sort(key=lambda h: (-h["score"], h["level"]))  # a directory first on a tie
        out: dict[str, Any] = {"memories": [], "resources": [], "skills": []}
        for h in hits:
            out[_BUCKET[h["context_type"]]].append(h)
        out["total"] = len(hits)
        return out

    def _files(self, r: Req) -> list[tuple[str, list[str]]]:
        """(file URI, lines) of everything grep can see: entries and session message logs."""
        files = [(e.uri, e.content.splitlines()) for e in self._visible_entries(r.ctx)]
        for s in self.tenant(r.ctx.account, r.ctx.user).sessions.values():
            files.append((f"{s.uri}/messages.jsonl", [json.dumps(m, ensure_ascii=False) for m in s.messages]))
            for a in s.archives:
                files.append((f"{a.uri}/messages.jsonl", [json.dumps(m, ensure_ascii=False) for m in a.messages]))
        return files

    def _check_session_path(self, r: Req, target: str) -> None:
        parts = uri_parts(target)
        if (
            len(parts) >= 4
            and parts[2] == "sessions"
            and parts[3] not in self.tenant(r.ctx.account, r.ctx.user).sessions
        ):
            raise FakeError("NOT_FOUND", f"File not found: {target}", {"resource": target, "type": "file"})

    def _r_grep(self, r: Req) -> dict[str, Any]:
        body = r.body()
        target = self._target(r.ctx, require_str(body, "uri"))
        pattern = require_str(body, "pattern")
        try:
            rx = re.compile(pattern, re.IGNORECASE if body.get("case_insensitive") else 0)
        except re.error as exc:
            raise FakeError("INVALID_ARGUMENT", f"invalid pattern: {exc}") from exc
        self._check_session_path(r, target)
        cap = body.get("node_limit") or 256
        files = [(uri, lines) for uri, lines in self._files(r) if under(uri, target)]
        matches = [
            {"line": i, "uri": uri, "content": line}
            for uri, lines in files
            for i, line in enumerate(lines, 1)
            if rx.search(line)
        ][:cap]
        return {"matches": matches, "count": len(matches), "match_count": len(matches), "files_scanned": len(files)}

    # --- content ----------------------------------------------------------------------

    def _lookup(self, r: Req) -> tuple[str, Entry | None, Any]:
        uri = r.query.get("uri")
        if not uri:
            raise invalid("Field required", "uri")
        target = self._target(r.ctx, uri)
        entry = next((e for e in self._visible_entries(r.ctx) if e.uri == target), None)
        archive = None
        for s in self.tenant(r.ctx.account, r.ctx.user).sessions.values():
            archive = next((a for a in s.archives if a.uri == target), archive)
        return target, entry, archive

    def _children(self, r: Req, target: str) -> list[Entry]:
        return [e for e in self._visible_entries(r.ctx) if e.uri != target and under(e.uri, target)]

    def _r_read(self, r: Req) -> str:
        target, entry, _ = self._lookup(r)
        if entry is not None:
            return entry.content
        for uri, lines in self._files(r):
            if uri == target:
                return "\n".join(lines)
        if self._children(r, target):
            raise FakeError("INVALID_ARGUMENT", f"{target} is a directory")
        raise FakeError("NOT_FOUND", f"File not found: {target}", {"resource": target, "type": "file"})

    def _r_abstract(self, r: Req) -> str:
        return self._summary(r, "abstract")

    def _r_overview(self, r: Req) -> str:
        return self._summary(r, "overview")

    def _summary(self, r: Req, kind: str) -> str:
        target, entry, archive = self._lookup(r)
        if entry is not None:
            return entry.abstract if kind == "abstract" else (entry.overview or entry.content)
        if archive is not None:
            return str(getattr(archive, kind))
        children = self._children(r, target)
        if children:
            if kind == "abstract":
                return f"# {target} [Directory abstract is not ready]"
            return "\n".join(f"- {c.uri}: {c.abstract}" for c in children)
        raise FakeError("NOT_FOUND", f"File not found: {target}", {"resource": target, "type": "file"})

    def _r_rm(self, r: Req) -> dict[str, Any]:
        uri = r.query.get("uri")
        if not uri:
            raise invalid("Field required", "uri")
        target = self._target(r.ctx, uri)
        recursive = r.query.get("recursive", "false").lower() in {"true", "1"}
        store = self.entries.get(r.ctx.account, {})
        doomed = [u for u in store if self._visible(r.ctx, u) and (u == target or (recursive and under(u, target)))]
        for u in doomed:
            del store[u]
        sessions = self.tenant(r.ctx.account, r.ctx.user).sessions
        for sid in [sid for sid, s in sessions.items() if recursive and under(s.uri, target)]:
            del sessions[sid]
            doomed.append(sid)
        return {"uri": target, "estimated_deleted_count": len(doomed), "task_id": new_id()}
