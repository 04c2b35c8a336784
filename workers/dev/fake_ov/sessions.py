"""Session, message, commit, phase-2 task and context routes of the OV fake.

A mixin of ``workers.dev.fake_ov.app.FakeOV`` (which owns auth, state and dispatch). Phase 2
advances only when its task is read (``phase2_reads_until_done`` "running" reads,
then the commit's ``phase2`` mode) or when ``run_phase2()`` is called. Until then
the archive is pending and its messages still show in ``/context``, as in 0.5.2.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from core.messages.tokens import estimate_tokens
from workers.dev.fake_ov.state import (
    Ctx,
    FakeArchive,
    FakeError,
    FakeSession,
    FakeTask,
    Req,
    build_messages,
    invalid,
    memory_worthy,
    message_tokens,
    new_id,
    now_iso,
    summarize,
)
from workers.dev.fake_ov.uploads import UploadRoutes

BATCH_MAX = 100
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class SessionRoutes(UploadRoutes):
    """Route handlers ``_r_<name>`` for sessions; see workers.dev.fake_ov.app."""

    # --- sessions ---------------------------------------------------------------------

    def _session(self, r: Req, *, create: bool = False, short: bool = False) -> FakeSession:
        t = self.tenant(r.ctx.account, r.ctx.user)
        sid = r.params["sid"]
        if sid not in t.sessions:
            if not create:
                details = None if short else {"resource": sid, "type": "session"}
                raise FakeError("NOT_FOUND", f"Session {sid} not found", details, short=short)
            t.sessions[sid] = self._new_session(r.ctx, sid)
        return t.sessions[sid]

    def _new_session(self, ctx: Ctx, sid: str) -> FakeSession:
        return FakeSession(sid, f"viking://user/{ctx.user}/sessions/{sid}", ctx.account, ctx.user)

    def _r_create_session(self, r: Req) -> dict[str, Any]:
        body = r.body(optional=True)
        sid = body.get("session_id") or new_id()
        if not isinstance(sid, str):
            raise invalid("Input should be a valid string", "session_id")
        sessions = self.tenant(r.ctx.account, r.ctx.user).sessions
        if sid in sessions:
            raise FakeError("ALREADY_EXISTS", f"Session '{sid}' already exists")
        s = sessions[sid] = self._new_session(r.ctx, sid)
        return {
            "session_id": sid,
            "uri": s.uri,
            "user": {"account_id": s.account, "user_id": s.user},
            "auto_commit_policy": None,
            "memory_extraction_config": {},
        }

    def _r_get_session(self, r: Req) -> dict[str, Any]:
        auto = r.query.get("auto_create", "false").lower() in {"true", "1", "yes"}
        return self._session(r, create=auto, short=True).state()

    def _r_list_sessions(self, r: Req) -> list[dict[str, Any]]:
        user = r.ctx.user
        return [
            {"session_id": sid, "uri": f"viking://user/{user}/sessions/{sid}", "is_dir": True}
            for sid in self.tenant(r.ctx.account, user).sessions
        ]

    def _r_delete_session(self, r: Req) -> dict[str, Any]:
        s = self._session(r)
        del self.tenant(r.ctx.account, r.ctx.user).sessions[s.session_id]
        return {"session_id": s.session_id}

    log_writes = False
    """Log each write (session, the messages' first words, the total after): what a test that
    finds a turn twice in OV shows of the writes that put it there (``fake-ov --log-writes``)."""

    def _append(self, s: FakeSession, new: list[dict[str, Any]]) -> int:
        s.messages += new
        s.total_message_count += len(new)
        s.updated_at = now_iso()
        if self.log_writes:
            said = " ".join(_first_word(m) for m in new)
            _writes.info("write %s: %d messages [%s], total %d", s.session_id, len(new), said, s.total_message_count)
        return len(new)

    def _r_add_message(self, r: Req) -> dict[str, Any]:
        new = build_messages(r.body())  # validated before the session is auto-created
        s = self._session(r, create=True)
        self._append(s, new)
        return {"session_id": s.session_id, "message_count": s.message_count, "pending_tokens": s.pending_tokens}

    def _r_add_messages(self, r: Req) -> dict[str, Any]:
        body = r.body()
        msgs = body.get("messages")
        if not isinstance(msgs, list):
            raise invalid("Field required", "messages")
        if len(msgs) > BATCH_MAX:
            raise invalid(f"List should have at most {BATCH_MAX} items after validation, not {len(msgs)}", "messages")
        new = [m for spec in msgs for m in build_messages(spec)]
        s = self._session(r, create=True)
        added = self._append(s, new)
        return {
            "session_id": s.session_id,
            "message_count": s.message_count,
            "added": added,
            "pending_tokens": s.pending_tokens,
        }

    def _r_commit(self, r: Req) -> dict[str, Any]:
        body = r.body(optional=True)
        s = self._session(r)
        keep = body.get("keep_recent_count", 0)
        if not isinstance(keep, int) or isinstance(keep, bool) or not 0 <= keep <= 10_000:
            raise invalid("keep_recent_count must be an integer in 0..10000", "keep_recent_count")
        wm = body.get("enable_working_memory")
        if wm is not None and not isinstance(wm, bool):
            raise invalid("Input should be a valid boolean", "enable_working_memory")
        s.keep_recent_count = keep
        head = {"session_id": s.session_id, "effective_enable_working_memory": bool(wm), "trace_id": ""}
        if not s.messages:
            return {
                **head,
                "status": "skipped",
                "task_id": None,
                "archive_uri": None,
                "archived": False,
                "reason": "no_messages",
            }
        split = max(0, len(s.messages) - keep) if keep > 0 else len(s.messages)
        if split == 0:
            return {
                **head,
                "status": "skipped",
                "task_id": None,
                "archive_uri": None,
                "archived": False,
                "reason": "all_within_keep_window",
            }
        index = len(s.archives) + 1
        task_id = new_id()
        archive = FakeArchive(index, f"{s.uri}/history/archive_{index:03d}", s.messages[:split], bool(wm), task_id)
        s.archives.append(archive)
        s.messages = s.messages[split:]
        s.commit_count = index
        s.last_commit_at = now_iso()
        t = self.tenant(r.ctx.account, r.ctx.user)
        t.tasks[task_id] = FakeTask(
            task_id, r.ctx.account, r.ctx.user, s.session_id, archive, self.phase2, max(0, self.phase2_reads_until_done)
        )
        return {
            **head,
            "status": "accepted",
            "task_id": task_id,
            "archive_uri": archive.uri,
            "archived": True,
            "estimated_active_tokens": 0,
            "budget_exceeded": False,
        }

    # --- phase 2 ----------------------------------------------------------------------

    def _r_get_task(self, r: Req) -> dict[str, Any]:
        task = self.tenant(r.ctx.account, r.ctx.user).tasks.get(r.params["tid"])
        if task is None:
            raise FakeError("NOT_FOUND", "Task not found or expired", {"resource": r.params["tid"], "type": "task"})
        if task.status not in TERMINAL:
            if task.mode == "hang" or task.reads_left > 0:
                task.reads_left = max(0, task.reads_left - 1)
                task.status = "running"
                task.updated_at = time.time()
            else:
                self._finish(task, task.mode)
        return task.to_dict()

    def _r_list_tasks(self, r: Req) -> list[dict[str, Any]]:
        """``GET /api/v1/tasks``: the caller's commit tasks, newest first (0.5.2's filters)."""
        q = r.query
        tasks = [
            t
            for t in self.tenant(r.ctx.account, r.ctx.user).tasks.values()
            if q.get("task_type") in (None, "session_commit")
            and q.get("resource_id") in (None, t.session_id)
            and q.get("status") in (None, t.status)
        ]
        tasks.sort(key=lambda t: t.created_at, reverse=True)
        return [t.to_dict() for t in tasks[: int(q.get("limit") or 50)]]

    def run_phase2(self) -> int:
        """Finish every open task now, each as its commit's mode ("hang" completes). Returns how many."""
        open_tasks = [t for ten in self.tenants.values() for t in ten.tasks.values() if t.status not in TERMINAL]
        for t in open_tasks:
            self._finish(t, "fail" if t.mode == "fail" else "complete")
        return len(open_tasks)

    def _finish(self, task: FakeTask, mode: str) -> None:
        archive = task.archive
        task.updated_at = time.time()
        if mode == "fail":
            archive.state = "failed"
            task.status = "failed"
            task.error = "memory extraction failed (fake OV phase2='fail')"
            return
        archive.state = "completed"
        if archive.enable_working_memory:
            archive.overview = summarize(archive.messages)
            archive.abstract = archive.overview.splitlines()[0]
        extracted = self._extract_memories(task)
        session = self.tenants[(task.account, task.user)].sessions.get(task.session_id)
        if session is not None and extracted:  # cumulative, like 0.5.2's session meta
            counts = session.memories_extracted
            counts["total"] = counts.get("total", 0) + len(extracted)
            counts["memory_write"] = counts.get("memory_write", 0) + len(extracted)
        task.status = "completed"
        task.result = {
            "session_id": task.session_id,
            "archive_uri": archive.uri,
            "memories_extracted": {"memory_write": len(extracted)} if extracted else {},
            "memory_uris": extracted,
        }

    def _extract_memories(self, task: FakeTask) -> list[str]:
        uris = []
        for m in task.archive.messages:
            text = memory_worthy(m)
            if text is None:
                continue
            if m.get("role") == "user":
                root = f"viking://user/{task.user}/memories"
            elif m.get("peer_id"):
                root = f"viking://user/{task.user}/peers/{m['peer_id']}/memories"
            else:
                continue
            uris.append(
                self.seed_memory(
                    text, uri=f"{root}/preferences/mem_{self.next_seq()}.md", account=task.account, user=task.user
                )
            )
        return uris

    # --- context ----------------------------------------------------------------------

    def _r_get_context(self, r: Req) -> dict[str, Any]:
        raw = r.query.get("token_budget", "128000")
        try:
            budget = int(raw)
        except ValueError:
            raise invalid("Input should be a valid integer", "token_budget") from None
        if budget < 0:
            raise FakeError(
                "INVALID_ARGUMENT",
                "token_budget must be greater than or equal to 0",
                {"field": "token_budget", "value": budget},
            )
        s = self._session(r)
        pending: list[FakeArchive] = []
        terminal = None
        for a in reversed(s.archives):  # newest first, stop at the first finished archive
            if a.state == "pending":
                pending.append(a)
                continue
            terminal = a
            break
        overview, failed = "", 0
        if terminal is not None and terminal.state == "completed":
            overview = terminal.overview.strip()
        elif terminal is not None:
            failed = 1
        merged = [m for a in reversed(pending) for m in a.messages] + s.messages
        kept, used = [], 0
        for m in reversed(merged):  # the newest messages that fit (0.5.2 selects by turns)
            cost = message_tokens(m)
            if used + cost > budget:
                break
            kept.append(m)
            used += cost
        kept.reverse()
        overview_tokens = estimate_tokens(overview)
        include = bool(overview) and overview_tokens <= budget - used
        archive_tokens = overview_tokens if include else 0
        return {
            "latest_archive_overview": overview if include else "",
            "pre_archive_abstracts": [],
            "messages": kept,
            "estimatedTokens": used + archive_tokens,
            "stats": {
                "totalArchives": len(s.archives),
                "includedArchives": 0,
                "droppedArchives": max(0, len(s.archives) - failed),
                "failedArchives": failed,
                "activeTokens": used,
                "archiveTokens": archive_tokens,
            },
        }

    def _r_get_archive(self, r: Req) -> dict[str, Any]:
        s = self._session(r)
        for a in s.archives:
            if a.archive_id == r.params["aid"] and a.state == "completed":
                return {
                    "archive_id": a.archive_id,
                    "abstract": a.abstract,
                    "overview": a.overview,
                    "messages": a.messages,
                }
        raise FakeError("NOT_FOUND", f"Archive {r.params['aid']} not found", short=True)


_writes = logging.getLogger("ovstream.fake_ov.writes")


def _first_word(message: dict[str, Any]) -> str:
    for part in message.get("parts") or []:
        if part.get("type") == "text":
            return str(part.get("text", "")).split(" ", 1)[0][:40]
    return "-"
