"""Import tools: add_resource and add_skill.

Local paths are read by this server process and uploaded to OV with
temp_upload (OV cannot see our disk, and offline it fetches nothing else);
URLs are handed to OV as they are.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from workers.rpc.context import Caller, RpcError, Services
from workers.rpc.models import AddResourceParams, AddSkillParams
from workers.rpc.tools.base import Tool, ToolResult, text_result

MAX_UPLOAD_BYTES = 32 * 1024 * 1024
"""Largest local file add_resource uploads (OV's own upload limit is of this order)."""
SKILL_FILE = "SKILL.md"
_URL = re.compile(r"^(?:https?|git|ssh)://|^git@", re.IGNORECASE)


def is_url(path: str) -> bool:
    return bool(_URL.match(path))


def _read_local(path: str) -> tuple[str, bytes]:
    """(file name, bytes) of a local file, or a 4xx saying why not."""
    if "\x00" in path:  # the OS refuses such a name (ValueError), never a file
        raise RpcError(400, "invalid_path", "the path contains a NUL character", "params.path")
    file = Path(path).expanduser()
    try:
        if file.is_dir():
            raise RpcError(400, "not_a_file", f"{path} is a directory; give a file", "params.path")
        size = file.stat().st_size
        if size > MAX_UPLOAD_BYTES:
            raise RpcError(
                413,
                "file_too_large",
                f"{path} has {size} bytes; at most {MAX_UPLOAD_BYTES} are uploaded",
                "params.path",
            )
        return file.name, file.read_bytes()
    except FileNotFoundError:
        raise RpcError(400, "path_not_found", f"no such file: {path}", "params.path") from None
    except PermissionError:
        raise RpcError(400, "path_unreadable", f"cannot read {path}: permission denied", "params.path") from None
    except OSError as exc:
        raise RpcError(400, "path_unreadable", f"cannot read {path}: {exc.strerror or exc}", "params.path") from None


def _imported(result: Any) -> dict[str, Any]:
    return result if isinstance(result, dict) else {"result": result}


async def add_resource(svc: Services, caller: Caller, p: AddResourceParams) -> ToolResult:
    ov = svc.ov_for(caller)
    source: str
    if p.path and is_url(p.path):
        result = await ov.add_resource(p.path, to=p.to, reason=p.reason, wait=p.wait)
        source = p.path
    else:
        if p.path:
            filename, data = await asyncio.to_thread(_read_local, p.path)
            source = p.path
        else:
            filename, data = p.filename or "upload.txt", (p.content or "").encode("utf-8")
            source = filename
        upload_id = await ov.temp_upload(filename, data)
        result = await ov.add_resource(temp_file_id=upload_id, to=p.to, reason=p.reason, wait=p.wait)
    details = _imported(result)
    root = details.get("root_uri") or ""
    return text_result(
        f"Imported OpenViking resource from {source}. {root}".strip(),
        **{**details, "action": "resource_imported", "source": source},
    )


def _read_skill(path: str) -> str:
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / SKILL_FILE
    _, data = _read_local(str(file))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RpcError(400, "not_text", f"{file} is not UTF-8 text", "params.path") from None


async def add_skill(svc: Services, caller: Caller, p: AddSkillParams) -> ToolResult:
    text = p.content if p.content else await asyncio.to_thread(_read_skill, p.path or "")
    details = _imported(await svc.ov_for(caller).add_skill(text, wait=p.wait))
    name = f" ({details['name']})" if details.get("name") else ""
    uri = details.get("uri") or details.get("root_uri") or ""
    return text_result(f"Imported OpenViking skill{name}. {uri}".strip(), **{**details, "action": "skill_imported"})


TOOLS = [
    Tool(
        "add_resource",
        AddResourceParams,
        add_resource,
        "Import a document (URL, server-local file, or uploaded content) into viking://resources.",
    ),
    Tool(
        "add_skill",
        AddSkillParams,
        add_skill,
        "Import a SKILL.md (text or server-local path) into viking://agent/skills.",
    ),
]
