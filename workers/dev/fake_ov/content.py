"""Search, content, filesystem, resources, skills and admin routes of the OV fake.

A mixin of ``workers.dev.fake_ov.app.FakeOV`` (which owns auth, state and dispatch).
``find`` scores leaves by word overlap (0..1). Like 0.5.2 it also returns, whatever
the query, a level-1 hit ``<dir>/.overview.md`` scoring 0.5 for every directory
holding content in scope, plus (fake only) a level-0 ``<root>/.abstract.md`` for
each content root: callers must keep level 2.
"""

from __future__ import annotations

import base64
import json
import re
from email import policy
from email.parser import BytesParser
from typing import Any

from workers.dev.fake_ov.state import (
    Ctx,
    Entry,
    FakeError,
    Req,
    canonical_uri,
    context_type_of,
    invalid,
    lexical_score,
    new_id,
    under,
    uri_parts,
)
from workers.dev.fake_ov.store import FakeStore

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
RESOURCE_FIELDS = frozenset(
    {
        "path",
        "temp_file_id",
        "add_type",
        "to",
        "parent",
        "create_parent",
        "reason",
        "instruction",
        "wait",
        "strict",
        "internal_task",
        "source_name",
        "ignore_dirs",
        "include",
        "exclude",
        "directly_upload_media",
        "preserve_structure",
        "args",
        "telemetry",
        "watch_interval",
        "is_active",
        "processing_mode",
        "tags",
        "tag_mode",
        "acl",
    }
)
SKILL_FIELDS = frozenset(
    {"data", "temp_file_id", "skills", "list_only", "wait", "source_metadata", "target_uri", "telemetry"}
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


def _reject_unknown(body: dict[str, Any], allowed: frozenset[str]) -> None:
    extra = sorted(set(body) - allowed)
    if extra:
        raise invalid(f"Extra inputs are not permitted: {', '.join(extra)}", extra[0])


def _require_str(body: dict[str, Any], key: str) -> str:
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


def _leaf_name(path: str) -> str:
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
        _reject_unknown(body, FIND_FIELDS)
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
        target = self._target(r.ctx, _require_str(body, "uri"))
        pattern = _require_str(body, "pattern")
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

    # --- uploads, resources, skills ---------------------------------------------------

    def _r_temp_upload(self, r: Req) -> dict[str, Any]:
        ctype = r.request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise FakeError("INVALID_ARGUMENT", "multipart/form-data with a 'file' field is required")
        msg = BytesParser(policy=policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + r.request.content
        )
        for part in msg.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                filename = part.get_filename() or "upload.tmp"
                ext = "." + filename.rsplit(".", 1)[1] if "." in filename else ".tmp"
                temp_id = f"upload_{new_id()}{ext}"
                payload = part.get_payload(decode=True)
                self.uploads[temp_id] = (filename, payload if isinstance(payload, bytes) else b"")
                return {"temp_file_id": temp_id}
        raise invalid("Field required", "file")

    def _take_upload(self, temp_id: str) -> tuple[str, str]:
        if temp_id not in self.uploads:
            raise FakeError("INVALID_ARGUMENT", f"Temporary upload not found or expired: {temp_id}")
        filename, data = self.uploads.pop(temp_id)
        return filename, data.decode("utf-8", errors="replace")

    def _r_add_resource(self, r: Req) -> dict[str, Any]:
        body = r.body()
        _reject_unknown(body, RESOURCE_FIELDS)
        path, temp_id = body.get("path"), body.get("temp_file_id")
        if not path and not temp_id:
            raise FakeError("INVALID_ARGUMENT", "Either 'path' or 'temp_file_id' must be provided")
        to = body.get("to")
        if to:
            to = self._target(r.ctx, to, "to")
            if context_type_of(to) != "resource" or uri_parts(to)[:1] not in (["resources"], ["user"]):
                raise FakeError("INVALID_URI", "to must target resource content", {"uri": to})
        if temp_id:
            filename, text = self._take_upload(temp_id)
        else:
            filename, text = _leaf_name(str(path)), f"Resource fetched from {path}"
        root_uri = to or f"viking://resources/{_leaf_name(filename).rsplit('.', 1)[0]}"
        abstract = next((ln.strip() for ln in text.splitlines() if ln.strip()), filename)[:200]
        self.entries.setdefault(r.ctx.account, {})[root_uri] = Entry(root_uri, text, abstract)
        return {"status": "success", "root_uri": root_uri, "source_path": path or filename}

    def _r_add_skill(self, r: Req) -> dict[str, Any]:
        body = r.body()
        _reject_unknown(body, SKILL_FIELDS)
        data = body.get("data")
        if body.get("temp_file_id"):
            _, data = self._take_upload(body["temp_file_id"])
        if isinstance(data, dict):
            name, desc, text = data.get("name"), data.get("description", ""), data.get("content", "")
        elif isinstance(data, str):
            head = re.match(r"^---\s*\n(.*?)\n---", data, re.S)
            meta = dict(re.findall(r"^(\w+):\s*(.*)$", head.group(1), re.M)) if head else {}
            name, desc, text = meta.get("name"), meta.get("description", ""), data
        else:
            raise FakeError("INVALID_ARGUMENT", "Either 'data' or 'temp_file_id' must be provided")
        if not name or not re.match(r"^[A-Za-z0-9_.-]+$", str(name).strip()):
            raise FakeError("INVALID_ARGUMENT", "SKILL.md needs a front-matter 'name'")
        uri = f"viking://agent/skills/{str(name).strip()}"
        abstract = f"name: {str(name).strip()}\ndescription: {desc}".strip()
        self.entries.setdefault(r.ctx.account, {})[uri] = Entry(uri, text, abstract)
        return {"status": "success", "root_uri": uri, "uri": uri, "name": str(name).strip(), "auxiliary_files": 0}

    # --- admin ------------------------------------------------------------------------

    def _new_key(self, account: str, user: str, admin: bool) -> str:
        b64 = base64.urlsafe_b64encode
        key = f"{b64(account.encode()).decode()}.{b64(user.encode()).decode()}.{new_id()}"
        self.api_keys[key] = (account, user)
        if admin:
            self.admin_keys.add(key)
        return key

    def _r_admin_create_account(self, r: Req) -> dict[str, Any]:
        body = r.body()
        account, admin = _require_str(body, "account_id"), _require_str(body, "admin_user_id")
        if r.ctx.role != "root" and self.auth_enabled:
            raise FakeError("PERMISSION_DENIED", "ROOT role required")
        if account in self.accounts:
            raise FakeError("ALREADY_EXISTS", f"Account '{account}' already exists")
        self.accounts[account] = {admin: "admin"}
        return {"account_id": account, "admin_user_id": admin, "user_key": self._new_key(account, admin, admin=True)}

    def _r_admin_create_user(self, r: Req) -> dict[str, Any]:
        body = r.body()
        account, user = r.params["acct"], _require_str(body, "user_id")
        role = body.get("role", "user")
        if role not in {"user", "admin"}:
            raise FakeError("INVALID_ARGUMENT", f"invalid role: {role!r}")
        if self.auth_enabled and r.ctx.role != "root" and r.ctx.account != account:
            raise FakeError("PERMISSION_DENIED", "admin of this account required")
        users = self.accounts.get(account)
        if users is None:
            if self.auth_enabled:
                raise FakeError("NOT_FOUND", f"Account {account} not found")
            users = self.accounts[account] = {}
        if user in users:
            raise FakeError("ALREADY_EXISTS", f"User '{user}' already exists in '{account}'")
        users[user] = role
        return {"account_id": account, "user_id": user, "user_key": self._new_key(account, user, admin=role == "admin")}
