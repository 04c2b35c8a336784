"""Uploads, resources, skills and the admin API of the fake (``UploadRoutes``)."""

from __future__ import annotations

import base64
import re
from email import policy
from email.parser import BytesParser
from typing import Any

from workers.dev.fake_ov.content import ContentRoutes, leaf_name, reject_unknown, require_str
from workers.dev.fake_ov.state import Entry, FakeError, Req, invalid, new_id
from workers.dev.fake_ov.uris import context_type_of, uri_parts

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


class UploadRoutes(ContentRoutes):
    """Route handlers ``_r_<name>`` for uploads, resources, skills and admin; see workers.dev.fake_ov.app."""

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
        reject_unknown(body, RESOURCE_FIELDS)
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
            filename, text = leaf_name(str(path)), f"Resource fetched from {path}"
        root_uri = to or f"viking://resources/{leaf_name(filename).rsplit('.', 1)[0]}"
        abstract = next((ln.strip() for ln in text.splitlines() if ln.strip()), filename)[:200]
        self.entries.setdefault(r.ctx.account, {})[root_uri] = Entry(root_uri, text, abstract)
        return {"status": "success", "root_uri": root_uri, "source_path": path or filename}

    def _r_add_skill(self, r: Req) -> dict[str, Any]:
        body = r.body()
        reject_unknown(body, SKILL_FIELDS)
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
        account, admin = require_str(body, "account_id"), require_str(body, "admin_user_id")
        if r.ctx.role != "root" and self.auth_enabled:
            raise FakeError("PERMISSION_DENIED", "ROOT role required")
        if account in self.accounts:
            raise FakeError("ALREADY_EXISTS", f"Account '{account}' already exists")
        self.accounts[account] = {admin: "admin"}
        return {"account_id": account, "admin_user_id": admin, "user_key": self._new_key(account, admin, admin=True)}

    def _r_admin_create_user(self, r: Req) -> dict[str, Any]:
        body = r.body()
        account, user = r.params["acct"], require_str(body, "user_id")
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
