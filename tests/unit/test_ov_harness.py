"""The offline OV harness without OV: workers.dev.model_server / model_answers / local_ov."""

from __future__ import annotations

import ast
import base64
import json
import os
import struct
from pathlib import Path

import httpx
import pytest

from workers.dev import local_ov
from workers.dev.model_answers import answer, extraction_program, topic_of
from workers.dev.model_server import GARBAGE_ANSWER, cosine, embed, start_model_server, tokenize

EXTRACTION_SYSTEM = (
    "## Output Format: restricted Python memory SDK\n"
    "- sdk.create_preferences(*, user: str, topic: str, content: str)\n"
    "- sdk.set_profile(*, content: str)\n"
)


def conversation(*lines: tuple[str, str]) -> str:
    body = "\n".join(f"[{i}][{role}][{role}]: {text}" for i, (role, text) in enumerate(lines))
    return f"## Conversation History\n**Session Time:** x\n\n{body}\n\nAfter exploring, analyze ..."


# --- embeddings ---------------------------------------------------------------------------


def test_tokenize_words_and_cjk() -> None:
    assert tokenize("I prefer Dark-Roast 2x!") == ["i", "prefer", "dark", "roast", "2x"]
    assert tokenize("我喜欢茶 tea") == ["我", "喜", "欢", "茶", "tea"]


def test_embedding_is_stable_normalised_and_lexical() -> None:
    a = embed("dark roast coffee in the morning")
    assert a == embed("dark roast coffee in the morning")
    assert len(a) == 64 and abs(sum(v * v for v in a) - 1.0) < 1e-9
    near = cosine(a, embed("coffee roast"))
    far = cosine(a, embed("quantum chromodynamics lecture"))
    assert near > far and near > 0.4
    assert embed("", 16) == [1.0] + [0.0] * 15  # never the zero vector
    assert len(embed("x", 8)) == 8


# --- chat answers -------------------------------------------------------------------------


def test_extraction_program_creates_preferences_and_profile() -> None:
    texts = [
        EXTRACTION_SYSTEM,
        conversation(("user", "I prefer dark roast coffee. My name is Ada."), ("assistant", "I like that too.")),
    ]
    program = extraction_program(texts)
    calls = [(n.value.func.attr, {k.arg: k.value.value for k in n.value.keywords}) for n in ast.parse(program).body]
    assert calls == [
        (
            "create_preferences",
            {"user": "default", "topic": "dark_roast_coffee", "content": "- I prefer dark roast coffee."},
        ),
        ("set_profile", {"content": "# User\n- My name is Ada."}),
        ("commit", {}),
    ]
    assert "I like that too" not in program  # assistant lines are not the user's preferences


def test_extraction_updates_a_bound_preference_instead_of_recreating() -> None:
    record = {
        "object_name": "preferences_1",
        "memory_type": "preferences",
        "fields": {"user": "default", "topic": "dark_roast_coffee", "content": "- old fact"},
    }
    texts = [
        EXTRACTION_SYSTEM,
        conversation(("user", "I prefer dark roast coffee.")),
        "# Existing memory loaded by prefetch\n" + json.dumps(record),
    ]
    program = extraction_program(texts)
    ast.parse(program)
    assert program.startswith('preferences_1.content.update("""- old fact\n- I prefer dark roast coffee.""")')
    assert "create_preferences" not in program


def test_extraction_without_facts_or_methods_is_only_commit() -> None:
    assert extraction_program([EXTRACTION_SYSTEM, conversation(("user", "Hello there."))]) == "sdk.commit()"
    no_methods = "## Output Format: restricted Python memory SDK\n"
    assert extraction_program([no_methods, conversation(("user", "I prefer tea."))]) == "sdk.commit()"


def test_literal_quoting_survives_quotes_and_backslashes() -> None:
    texts = [EXTRACTION_SYSTEM, conversation(("user", 'I prefer """quotes""" and back\\slashes"'))]
    tree = ast.parse(extraction_program(texts))
    call = tree.body[0].value
    content = next(k.value.value for k in call.keywords if k.arg == "content")
    assert content == '- I prefer """quotes""" and back\\slashes"'


def test_topic_is_three_content_words() -> None:
    assert topic_of("I really prefer green tea with jasmine.") == "green_tea_jasmine"
    assert topic_of("I like it") == "general"


def test_working_memory_create_and_update() -> None:
    prompt = (
        "Working Memory ...\n<session_content>\n[user]: I prefer tea. Also biscuits.\n"
        "[assistant]: Fine.\n</session_content>\n"
    )
    kind, doc, calls = answer([{"role": "user", "content": prompt}], [])
    assert kind == "wm_create" and calls == []
    assert doc.startswith("# Working Memory\n") and doc.count("\n## ") == 7
    assert "- user: Also biscuits." in doc
    update = "<current_wm>\n# Working Memory\n</current_wm>\n<new_content>\n[user]: New fact here.\n</new_content>"
    tool = {"type": "function", "function": {"name": "update_working_memory"}}
    kind, content, calls = answer([{"role": "user", "content": update}], [tool])
    assert kind == "wm_update" and content == ""
    ((name, args),) = calls
    assert name == "update_working_memory" and len(args["sections"]) == 7
    assert args["sections"]["Key Facts & Decisions"] == {"op": "APPEND", "items": ["user: New fact here."]}
    assert args["sections"]["Open Issues"] == {"op": "KEEP"}


def test_other_prompts_get_a_short_summary() -> None:
    kind, content, _ = answer(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Summarise this directory. It has files."},
        ],
        [],
    )
    assert (kind, content) == ("other", "Summary: Summarise this directory.")


# --- the HTTP server ------------------------------------------------------------------------


@pytest.fixture
def server():
    handle = start_model_server("127.0.0.1", 0, dimension=16)
    try:
        yield handle
    finally:
        handle.stop()


def test_http_routes_and_modes(server) -> None:
    with httpx.Client(base_url=server.base_url, trust_env=False, timeout=10) as c:
        assert c.get("/v1/models").json()["data"][0]["id"]
        floats = c.post("/v1/embeddings", json={"input": ["a b", "c"], "model": "m"}).json()
        assert [d["index"] for d in floats["data"]] == [0, 1]
        assert floats["data"][0]["embedding"] == embed("a b", 16)
        b64 = c.post("/v1/embeddings", json={"input": "a b", "encoding_format": "base64", "dimensions": 8}).json()
        raw = base64.b64decode(b64["data"][0]["embedding"])
        assert list(struct.unpack("<8f", raw)) == pytest.approx(embed("a b", 8), abs=1e-6)

        chat = {
            "model": "m",
            "messages": [
                {"role": "system", "content": EXTRACTION_SYSTEM},
                {"role": "user", "content": conversation(("user", "I love jazz."))},
            ],
        }
        msg = c.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]
        assert msg["content"].startswith('sdk.create_preferences(user="""default""", topic="""jazz"""')

        assert c.post("/admin/mode", json={"mode": "garbage"}).json() == {"mode": "garbage"}
        msg = c.post("/v1/chat/completions", json=chat).json()["choices"][0]["message"]
        assert msg["content"] == GARBAGE_ANSWER
        server.set_mode("error")
        assert c.post("/v1/chat/completions", json=chat).status_code == 500
        assert c.post("/admin/mode", json={"mode": "nope"}).status_code == 400
        assert c.get("/admin/stats").json()["mode"] == "error"
        assert server.counts()["extraction"] == 1 and server.counts()["garbage"] == 1

        tool = {"type": "function", "function": {"name": "update_working_memory", "parameters": {}}}
        server.set_mode("normal")
        wm = {
            "messages": [
                {"role": "user", "content": "<current_wm>x</current_wm><new_content>\n[user]: hi.\n</new_content>"}
            ],
            "tools": [tool],
        }
        choice = c.post("/v1/chat/completions", json=wm).json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]["function"]
        assert call["name"] == "update_working_memory" and "sections" in json.loads(call["arguments"])


# --- local_ov helpers -----------------------------------------------------------------------


def test_write_ov_config(tmp_path: Path) -> None:
    path = local_ov.write_ov_config(
        tmp_path, ov_port=1999, model_url="http://127.0.0.1:5/v1/", root_api_key="k", dimension=32
    )
    conf = json.loads(path.read_text())
    assert conf["server"] == {"host": "127.0.0.1", "port": 1999, "root_api_key": "k"}
    assert conf["embedding"]["dense"]["api_base"] == "http://127.0.0.1:5/v1"
    assert conf["embedding"]["dense"]["dimension"] == 32
    assert conf["vlm"]["max_retries"] == 0
    assert Path(conf["storage"]["workspace"]).is_dir()
    dev = json.loads(local_ov.write_ov_config(tmp_path, ov_port=1, model_url="u").read_text())
    assert "root_api_key" not in dev["server"]


def test_find_openviking_server_env_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "openviking-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv(local_ov.OV_SERVER_ENV, str(exe))
    assert local_ov.find_openviking_server() == str(exe)
    monkeypatch.setenv(local_ov.OV_SERVER_ENV, str(tmp_path / "missing"))
    assert local_ov.find_openviking_server() is None


def test_start_local_ov_reports_log_tail_when_the_server_exits(tmp_path: Path) -> None:
    fake = tmp_path / "fake-ov"
    fake.write_text("#!/bin/sh\necho 'boom: no config for you'\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(local_ov.LocalOVError) as info:
        local_ov.start_local_ov(
            tmp_path / "w", port=1, model_url="http://127.0.0.1:9/v1", binary=str(fake), timeout_s=30
        )
    assert "exited with 3" in str(info.value) and "boom: no config for you" in str(info.value)
    assert os.path.exists(tmp_path / "w" / "ov.log")
