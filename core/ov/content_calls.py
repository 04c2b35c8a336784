"""The calls of the OV client (core.ov.client) beyond sessions: search, content, the
filesystem, uploads, resources and skills, and the admin calls of a root or account-admin key.

A mixin of ``OVClient``: each goes through its one IO seam (``_call``, ``_get``, ``_post``).
"""

from __future__ import annotations

import re
from typing import Any

from core.ov.calls import segment
from core.ov.envelope import OVError, decode_result, object_result
from core.ov.models import FindResult, GrepResult

_UPLOAD_ID = re.compile(r"^(upload_[0-9a-f]{32}(\.[A-Za-z0-9]+)?|shared_[\w.-]+)$")


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


class ContentCalls:
    """Search, content, filesystem, uploads, resources, skills and admin, for ``OVClient``."""

    async def _call(self, method: str, path: str, *, idempotent: bool, raw: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError  # OVClient's IO seam

    async def _get(self, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def _post(
        self, path: str, body: dict[str, Any] | None = None, *, idempotent: bool = False, **kwargs: Any
    ) -> Any:
        raise NotImplementedError

    # --- search and content -----------------------------------------------------------

    async def find(
        self,
        query: str,
        *,
        target_uri: str | list[str],
        limit: int,
        score_threshold: float | None = None,
        context_type: str | list[str] | None = None,
    ) -> FindResult:
        body: dict[str, Any] = {"query": query, "target_uri": target_uri, "limit": limit}
        if score_threshold is not None:
            body["score_threshold"] = score_threshold
        if context_type is not None:
            body["context_type"] = context_type
        return decode_result(await self._post("/api/v1/search/find", body, idempotent=True), FindResult)

    async def grep(self, uri: str, pattern: str, *, case_insensitive: bool = True) -> GrepResult:
        body = {"uri": uri, "pattern": pattern, "case_insensitive": case_insensitive}
        return decode_result(await self._post("/api/v1/search/grep", body, idempotent=True), GrepResult)

    async def _content(self, kind: str, uri: str) -> str:
        result = await self._get(f"/api/v1/content/{kind}", params={"uri": uri})
        return result if isinstance(result, str) else ("" if result is None else str(result))

    async def read(self, uri: str) -> str:
        return await self._content("read", uri)

    async def abstract(self, uri: str) -> str:
        return await self._content("abstract", uri)

    async def overview(self, uri: str) -> str:
        return await self._content("overview", uri)

    async def list_sessions(self) -> list[str]:
        """The ids of every session of the caller's user (``GET /api/v1/sessions``)."""
        result = await self._get("/api/v1/sessions")
        rows = result if isinstance(result, list) else []
        return [str(r["session_id"]) for r in rows if isinstance(r, dict) and isinstance(r.get("session_id"), str)]

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        """Ask OV to stop a task (``POST /api/v1/tasks/{id}/cancel``)."""
        return object_result(await self._post(f"/api/v1/tasks/{segment(task_id)}/cancel", {}, idempotent=True))

    async def files(self, uri: str) -> int:
        """How many files (not directories) OV keeps under ``uri`` (0: nothing, or no such place)."""
        try:
            result = await self._get("/api/v1/fs/tree", params={"uri": uri, "node_limit": "100000"})
        except OVError as exc:
            if exc.code == "NOT_FOUND":
                return 0
            raise
        return sum(1 for row in result or [] if isinstance(row, dict) and not row.get("isDir"))

    async def rm(self, uri: str, *, recursive: bool = False) -> dict[str, Any]:
        params = {"uri": uri, "recursive": "true" if recursive else "false"}
        return object_result(await self._call("DELETE", "/api/v1/fs", idempotent=True, params=params))

    # --- uploads, resources, skills ---------------------------------------------------

    async def temp_upload(self, filename: str, content: bytes) -> str:
        """Upload a file; returns its ``temp_file_id`` for add_resource / add_skill."""
        result = await self._call(
            "POST", "/api/v1/resources/temp_upload", idempotent=False, files={"file": (filename, content)}
        )
        if not isinstance(result, dict) or not isinstance(result.get("temp_file_id"), str):
            raise OVError("BAD_RESPONSE", f"temp_upload answered {result!r}", status=200)
        return str(result["temp_file_id"])

    async def add_resource(
        self,
        path: str | None = None,
        *,
        temp_file_id: str | None = None,
        to: str | None = None,
        reason: str | None = None,
        wait: bool | None = None,
    ) -> dict[str, Any]:
        """Add a resource from a public URL (``path``) or an upload (``temp_file_id``).

        0.5.2 takes an upload id in its own ``temp_file_id`` field; a ``path`` that
        looks like one (``upload_<hex>.<ext>``) is sent there too.
        """
        if temp_file_id is None and path is not None and _UPLOAD_ID.match(path):
            path, temp_file_id = None, path
        body = _drop_none({"path": path, "temp_file_id": temp_file_id, "to": to, "reason": reason, "wait": wait})
        return object_result(await self._post("/api/v1/resources", body))

    async def add_skill(
        self, data: Any = None, *, temp_file_id: str | None = None, wait: bool | None = None
    ) -> dict[str, Any]:
        """Add a skill from SKILL.md text (``data``) or an upload (``temp_file_id``)."""
        if temp_file_id is None and isinstance(data, str) and _UPLOAD_ID.match(data):
            data, temp_file_id = None, data
        body = _drop_none({"data": data, "temp_file_id": temp_file_id, "wait": wait})
        return object_result(await self._post("/api/v1/skills", body))

    # --- admin (root or account-admin key) --------------------------------------------

    async def admin_create_account(self, account_id: str, admin_user_id: str) -> dict[str, Any]:
        """Returns ``{account_id, admin_user_id, user_key}``."""
        return object_result(
            await self._post("/api/v1/admin/accounts", {"account_id": account_id, "admin_user_id": admin_user_id})
        )

    async def admin_create_user(self, account_id: str, user_id: str, role: str = "user") -> dict[str, Any]:
        """Returns ``{account_id, user_id, user_key}``."""
        return object_result(
            await self._post(f"/api/v1/admin/accounts/{segment(account_id)}/users", {"user_id": user_id, "role": role})
        )
