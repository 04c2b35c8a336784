"""OVClient errors and retries through httpx.MockTransport: codes, OVUnavailable, idempotency."""

from __future__ import annotations

import httpx
import pytest

from core.config import Settings
from core.ov.client import OVClient, OVError, OVRefused, OVUnavailable
from core.ov.envelope import REFUSED_HINT, error_for, is_passing
from tests.helpers.ov import Recorder, client, err, ok
from workers.dev.fake_ov.app import FakeOV

# --- errors ----------------------------------------------------------------------------

ERRORS = [
    (400, "INVALID_ARGUMENT"),
    (400, "INVALID_URI"),
    (401, "UNAUTHENTICATED"),
    (403, "PERMISSION_DENIED"),
    (404, "NOT_FOUND"),
    (409, "ALREADY_EXISTS"),
    (412, "FAILED_PRECONDITION"),
    (503, "UNAVAILABLE"),
]


@pytest.mark.parametrize(("status", "code"), ERRORS)
async def test_error_envelope_raises_ovError(status, code):
    rec = Recorder(err(status, code, "it failed", {"field": "x"}))
    with pytest.raises(OVError) as info:
        await client(rec, retries=0).get_session("s")
    e = info.value
    assert (e.code, e.status, e.details) == (code, status, {"field": "x"})
    assert e.message == "it failed" if status != 401 else e.message == f"it failed; {REFUSED_HINT}"
    # a refused key is a deployment fault waited out as OV away is, and says what to set
    assert isinstance(e, OVUnavailable) == (status in (401, 503))
    assert isinstance(e, OVRefused) == (status == 401)


async def test_error_code_missing_falls_back_to_status():
    rec = Recorder(httpx.Response(404, json={"status": "error", "error": None}))
    with pytest.raises(OVError) as info:
        await client(rec).get_task("t")
    assert (info.value.code, info.value.status) == ("NOT_FOUND", 404)


async def test_framework_error_without_envelope():
    rec = Recorder(httpx.Response(405, json={"detail": "Method Not Allowed"}))
    with pytest.raises(OVError) as info:
        await client(rec).get_task("t")
    assert info.value.status == 405 and "Method Not Allowed" in info.value.message


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>hello</html>"),
        httpx.Response(500, text="Internal Server Error"),
        httpx.Response(200, json=[1, 2]),
        httpx.Response(200, json={"result": {}}),
        httpx.Response(200, content=b'{"status": "ok", "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ],
    ids=["html", "text-500", "array", "no-envelope", "too-deep"],
)
async def test_bad_responses(response):
    with pytest.raises(OVError) as info:
        await client(Recorder(response), retries=0).get_task("t")
    assert info.value.code == "BAD_RESPONSE" and not isinstance(info.value, OVUnavailable)


async def test_non_json_503_is_unavailable():
    with pytest.raises(OVUnavailable) as info:
        await client(Recorder(httpx.Response(503, text="upstream down")), retries=0).get_task("t")
    assert (info.value.code, info.value.status) == ("UNAVAILABLE", 503)


async def test_wrong_result_shape_is_bad_response():
    with pytest.raises(OVError) as info:
        await client(Recorder(ok({"message_count": "many"}))).get_session("s")
    assert info.value.code == "BAD_RESPONSE"


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.ConnectTimeout("slow"),
        httpx.RemoteProtocolError("eof"),
    ],
)
async def test_transport_failures_are_unavailable_with_status_0(exc):
    with pytest.raises(OVUnavailable) as info:
        await client(Recorder(exc), retries=0).get_context("s", token_budget=1)
    assert (info.value.code, info.value.status) == ("UNAVAILABLE", 0)


# --- retries ---------------------------------------------------------------------------

IDEMPOTENT = [
    lambda c: c.health(),
    lambda c: c.get_session("s"),
    lambda c: c.get_task("t"),
    lambda c: c.get_context("s", token_budget=1),
    lambda c: c.get_archive("s", "a"),
    lambda c: c.delete_session("s"),
    lambda c: c.find("q", target_uri="viking://~/memories", limit=1),
    lambda c: c.grep("viking://~", "x"),
    lambda c: c.read("viking://r"),
    lambda c: c.abstract("viking://r"),
    lambda c: c.overview("viking://r"),
    lambda c: c.rm("viking://r"),
]
NON_IDEMPOTENT = [
    lambda c: c.create_session("s"),
    lambda c: c.add_message("s", {"role": "user", "content": "x"}),
    lambda c: c.add_messages("s", [{"role": "user", "content": "x"}]),
    lambda c: c.commit("s"),
    lambda c: c.temp_upload("a.md", b"x"),
    lambda c: c.add_resource("https://e/x"),
    lambda c: c.add_skill("---\nname: s\n---"),
    lambda c: c.admin_create_account("a", "b"),
    lambda c: c.admin_create_user("a", "b"),
]


def _ok_for_anything(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/health":
        return httpx.Response(200, json={"status": "ok"})
    if request.url.path.startswith("/api/v1/content/"):
        return ok("text")
    return ok({"temp_file_id": "upload_1"})


MID_WRITE = err(400, "INVALID_ARGUMENT", "Expecting value: line 1 column 1 (char 0)")
"""OV 0.5.2 reading its own session file while another write rewrites it (docs/OV-NOTES.md)."""


@pytest.mark.parametrize("call", IDEMPOTENT)
@pytest.mark.parametrize(
    "failure", [err(503, "UNAVAILABLE"), err(500, "INTERNAL"), MID_WRITE, httpx.ConnectError("refused")]
)
async def test_idempotent_calls_retry_then_succeed(call, failure):
    rec = Recorder(failure, failure, _ok_for_anything)
    await call(client(rec, retries=3))
    assert len(rec.requests) == 3


@pytest.mark.parametrize("call", IDEMPOTENT[:3])
async def test_idempotent_retries_are_bounded(call):
    rec = Recorder(err(503, "UNAVAILABLE"))
    with pytest.raises(OVUnavailable):
        await call(client(rec, retries=2))
    assert len(rec.requests) == 3


@pytest.mark.parametrize("call", NON_IDEMPOTENT)
@pytest.mark.parametrize(
    "failure", [err(503, "UNAVAILABLE"), err(500, "INTERNAL"), httpx.ConnectError("refused"), httpx.ReadTimeout("slow")]
)
async def test_non_idempotent_calls_are_never_retried(call, failure):
    rec = Recorder(failure, _ok_for_anything)
    with pytest.raises(OVError):
        await call(client(rec, retries=5))
    assert len(rec.requests) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "INVALID_ARGUMENT"), (404, "NOT_FOUND"), (401, "UNAUTHENTICATED"), (409, "ALREADY_EXISTS")],
)
async def test_client_errors_are_not_retried(status, code):
    rec = Recorder(err(status, code), ok({}))
    with pytest.raises(OVError):
        await client(rec, retries=3).get_session("s")
    assert len(rec.requests) == 1


@pytest.mark.parametrize(
    ("status", "message", "passing"),
    [
        (500, "anything", True),
        (503, "anything", True),
        (400, "Expecting value: line 1 column 1 (char 0)", True),
        (400, "Unterminated string starting at: line 1 column 9 (char 8)", True),
        (400, "bad uri: line 3", False),  # names a place, but is no JSONDecodeError
        (400, "Expecting value", False),
        (404, "Expecting value: line 1 column 1 (char 0)", False),
        (409, "locked", False),
    ],
)
def test_passing_trouble_is_oVs_own(status, message, passing):
    assert is_passing(error_for("X", message, status=status)) is passing


async def test_backoff_doubles(monkeypatch):
    delays: list[float] = []

    async def fake_sleep(d: float) -> None:
        delays.append(d)

    monkeypatch.setattr("core.ov.client.asyncio.sleep", fake_sleep)
    rec = Recorder(err(503, "UNAVAILABLE"))
    with pytest.raises(OVUnavailable):
        await client(rec, retries=3, backoff=0.2).get_task("t")
    assert delays == pytest.approx([0.2, 0.4, 0.8])


async def test_short_envelopes_of_the_fake_are_understood():
    fake = FakeOV()
    async with OVClient("http://ov", transport=fake.transport(), backoff=0) as ov:
        with pytest.raises(OVError) as missing:
            await ov.get_session("nope")  # 0.5.2's short envelope: no "result", no details
        assert (missing.value.code, missing.value.status, missing.value.details) == ("NOT_FOUND", 404, None)
        with pytest.raises(OVError) as too_many:
            await ov.scoped()._post(
                "/api/v1/sessions/s/messages/batch", {"messages": [{"role": "user", "content": "x"}] * 101}
            )
        assert too_many.value.code == "INVALID_ARGUMENT"
        assert too_many.value.details["validation_errors"][0]["loc"] == ["body", "messages"]
        with pytest.raises(OVError) as unknown:
            await ov.get_task("nope")
        assert unknown.value.details == {"resource": "nope", "type": "task"}


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ({"user_api_keys": {"alice": "key-a"}}, "ok"),  # tenant keys alone: asked as a tenant
        ({"api_key": "key-a"}, "ok"),
        ({"api_key": "not-a-key"}, "refuses key"),
        ({}, "refuses key"),  # no key at all, against an OV in API-key mode
    ],
)
async def test_the_key_check_asks_with_the_key_ovstream_acts_with(keys: dict, said: str) -> None:
    fake = FakeOV(api_keys={"key-a": ("acme", "alice")})
    ov = OVClient.from_settings(Settings(redis_url="fakeredis://", **keys), transport=fake.transport())
    try:
        assert (await ov.key_check(2.0)).startswith(said)
    finally:
        await ov.aclose()
