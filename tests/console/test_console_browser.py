"""The console in a real headless Chromium (Debian's, driven by selenium through its
chromedriver), served by a real uvicorn over a real redis-server: each page loads without a
console error, shows the figures the API gives, and leaves a screenshot (``.artifacts/console``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from core.config import Settings
from tests.helpers.console import (
    ARTIFACTS,
    CHILD_KEY,
    CREDENTIALS,
    DOC_SHOTS,
    KEY,
    OPS_TOKEN,
    OTHER_AGENT_SESSION,
    TENANT_SESSION,
    TENANT_TOKEN,
    USER_API_KEYS,
    VIEWER_TOKEN,
    browser_or_skip,
    seed,
)
from tests.helpers.rpc import TEST_SETTINGS
from tests.helpers.served import served
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.app import create_app
from workers.store.connection import connect

pytestmark = pytest.mark.redis

PAGE_WAIT_S = 60
"""How long a page may take to come after a click (a busy machine's Chromium is slow)."""


@pytest.fixture
def console(redis_settings: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The RPC served on a loopback port with something to show; (its URL, the seeding's facts)."""
    settings = Settings(
        **{**TEST_SETTINGS, **redis_settings, "rpc_credentials": CREDENTIALS, "user_api_keys": USER_API_KEYS}
    )
    fake = FakeOV()
    client = connect(settings)
    app = create_app(settings, ov_transport=fake.transport())
    with served(app) as port:
        url = f"http://127.0.0.1:{port}"
        yield url, seed(url, fake, client, settings, app)
    client.close()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver_path = browser_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _shot(driver: webdriver.Chrome, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, max(900, min(int(height) + 40, 4000)))
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    if DOC_SHOTS:  # scripts/screenshots: the docs' pictures, made here
        assert driver.save_screenshot(str(Path(DOC_SHOTS) / f"console-{name}.png"))


def _submit(driver: webdriver.Chrome, button: Any) -> None:
    """Click a form's button and wait for the page it leads to (a click returns before it).

    The old page is marked on its window object, which a navigation replaces; waiting for an
    old element to go stale instead raced Chromium mid-navigation on a busy machine ("Node
    with given id does not belong to the document", which is not a stale-element error)."""
    driver.execute_script("window.ovstreamOldPage = true")
    button.click()
    WebDriverWait(driver, PAGE_WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script("return !window.ovstreamOldPage && document.readyState === 'complete'")
    )


def _sign_in(driver: webdriver.Chrome, url: str, token: str) -> None:
    driver.get(f"{url}/console")
    assert driver.current_url.endswith("/console/login")  # no cookie yet: the form
    driver.find_element(By.NAME, "token").send_keys(token)
    _submit(driver, driver.find_element(By.CSS_SELECTOR, "form[action='/console/login'] button"))
    assert driver.current_url.endswith("/console")


def _text(driver: webdriver.Chrome, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text).strip()


def test_the_deployment_page_shows_what_the_status_api_says(console: Any, browser: webdriver.Chrome) -> None:
    url, seeded = console
    _sign_in(browser, url, OPS_TOKEN)
    api = httpx.get(f"{url}/v1/status", headers={"authorization": f"Bearer {OPS_TOKEN}"}).json()
    assert int(_text(browser, "#dead-letters")) == api["dead_letters"] == 3
    assert int(_text(browser, "#in-flight")) == api["commits_in_flight"]
    assert int(_text(browser, "#shards")) == len(api["shards"])
    waiting = sum((s["unread"] or 0) + s["pending"] for s in api["shards"])
    assert int(_text(browser, "#backlog")) == waiting > 0
    rows = browser.find_elements(By.CSS_SELECTOR, "#shard-table tr")[1:]
    assert len(rows) == len(api["shards"])
    lines = browser.find_elements(By.CSS_SELECTOR, "svg polyline.lag")
    lagging = {s["name"] or str(s["shard"]) for s in api["shards"] if (s["unread"] or 0) + s["pending"]}
    assert {line.get_attribute("data-shard") for line in lines} >= lagging  # a line per shard with lag
    outcomes = {c.get_attribute("data-status"): c.text for c in browser.find_elements(By.CSS_SELECTOR, ".outcome")}
    assert set(outcomes) == set(api["outcomes_last_hour"]) and "completed" in outcomes
    assert seeded.dead_letter_id in _text(browser, "#dead-letter-table")
    roles = [
        r.find_elements(By.TAG_NAME, "td")[0].text
        for r in browser.find_elements(By.CSS_SELECTOR, "#process-table tr")[1:]
    ]
    assert "rpc" in roles and [p["role"] for p in api["processes"]].count("rpc") == roles.count("rpc")  # the RPC too
    assert not _errors(browser)
    _shot(browser, "deployment")

    browser.find_element(By.CSS_SELECTOR, f"input[value='{seeded.dead_letter_id}']").click()
    _submit(browser, browser.find_element(By.ID, "replay"))  # ops acts as the service: it may replay
    assert "1 replayed, 0 released, 0 not" in _text(browser, "#message")  # what happened, as the CLI says it
    assert _dead_letters(url) == 2
    assert not _errors(browser)


def _dead_letters(url: str) -> int:
    return int(httpx.get(f"{url}/v1/status", headers={"authorization": f"Bearer {OPS_TOKEN}"}).json()["dead_letters"])


def test_replay_and_drop_say_what_they_did(console: Any, browser: webdriver.Chrome) -> None:
    url, seeded = console
    _sign_in(browser, url, OPS_TOKEN)
    browser.find_element(By.CSS_SELECTOR, f"input[value='{seeded.undecodable_id}']").click()
    _submit(browser, browser.find_element(By.ID, "replay"))
    said = _text(browser, "#message")
    assert said.startswith("0 replayed, 0 released, 1 not") and "kept: not replayable" in said  # kept, and why
    assert seeded.undecodable_id in _text(browser, "#dead-letter-table") and _dead_letters(url) == 3
    browser.execute_script("window.confirm = () => true")  # the drop asks first
    browser.find_element(By.CSS_SELECTOR, f"input[value='{seeded.undecodable_id}']").click()
    _submit(browser, browser.find_element(By.ID, "drop"))
    assert _text(browser, "#message").startswith("1 dropped")
    assert seeded.undecodable_id not in _text(browser, "#dead-letter-table") and _dead_letters(url) == 2
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    gone = httpx.post(f"{url}/console/dead-letters/drop", data={"id": seeded.undecodable_id}, cookies=cookies)
    assert "0 dropped; 1 not found" in httpx.URL(gone.headers["location"]).params["message"]
    assert not _errors(browser)


def test_the_session_inspector_shows_what_the_model_got_and_why(console: Any, browser: webdriver.Chrome) -> None:
    url, _ = console
    _sign_in(browser, url, OPS_TOKEN)
    browser.get(f"{url}/console/session")
    browser.find_element(By.NAME, "key").send_keys(KEY)
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form[action='/console/session'] button"))
    api = httpx.get(
        f"{url}/v1/sessions/inspect", params={"sessionKey": KEY}, headers={"authorization": f"Bearer {OPS_TOKEN}"}
    ).json()
    answer = api["assembled"]
    assert _text(browser, "#ov-session") == api["ov_session_id"]
    assert _text(browser, "#answer-reason") == answer["reason"]
    assert answer["reason"] in ("assembled", "lag_overlay")  # from the snapshot, not a passthrough
    assert _text(browser, "#answer-why").startswith("Why: the snapshot")
    assert int(_text(browser, "#answer-overlay")) == answer["overlay_messages"]
    assert (answer["overlay_messages"] > 0) == (answer["reason"] == "lag_overlay")
    assert int(_text(browser, "#answer-tokens")) == answer["estimated_tokens"]
    assert int(_text(browser, "#answer-messages")) == len(answer["messages"]) > 0
    assert len(browser.find_elements(By.CSS_SELECTOR, "#answer-table tr")) == len(answer["messages"]) + 1
    assert "relevant-memories" in _text(browser, "#system-prompt-addition")  # the recall block
    memories = api["recalled"]["memories"]
    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".memory-uri")]
    assert shown == [m["uri"] for m in memories] and len(memories) >= 1
    assert all(m["category"] for m in memories)  # derived from the URI where OV names none
    scores = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".memory-score")]
    assert scores == [f"{m['score']:.3f}" for m in memories]
    assert _text(browser, "#snapshot-id") == api["snapshot"]["applied_stream_id"]
    commits = browser.find_elements(By.CSS_SELECTOR, "#commits-table tr.commit")
    assert [c.get_attribute("data-status") for c in commits] == [c["status"] for c in api["commits"]]
    assert api["commits"][0]["status"] == "completed" and api["commits"][0]["memories_extracted"]
    assert not _errors(browser)
    _shot(browser, "session")

    browser.get(f"{url}/console/session?key={CHILD_KEY}")
    lineage = _text(browser, "#lineage")
    assert api["ov_session_id"] in lineage and "fork" in lineage and KEY in lineage
    assert not _errors(browser)
    _shot(browser, "subagent")


def test_the_inspector_lists_recent_sessions_and_finds_one_by_id_for_any_agent(
    console: Any, browser: webdriver.Chrome
) -> None:
    url, _ = console
    _sign_in(browser, url, OPS_TOKEN)
    browser.get(f"{url}/console/session")
    listed = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#recent-table tr.recent td:first-child")]
    assert OTHER_AGENT_SESSION in listed and TENANT_SESSION in listed  # newest first, every tenant for ops
    browser.find_element(By.NAME, "id").send_keys(OTHER_AGENT_SESSION)  # the id alone: agent demo's session
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form[action='/console/session'] button"))
    assert _text(browser, "#agent") == "demo" and _text(browser, "#ov-session") == OTHER_AGENT_SESSION
    assert _text(browser, "#answer-reason")  # its answer, not an empty page for agent main
    browser.get(f"{url}/console/session")
    link = browser.find_element(By.XPATH, f"//table[@id='recent-table']//a[code='{TENANT_SESSION}']")
    _submit(browser, link)
    assert _text(browser, "#ov-session") == TENANT_SESSION and "tenant acme" in _text(browser, "main p")
    assert not _errors(browser)
    _shot(browser, "recent")


def test_a_tenant_credential_sees_only_its_tenant(console: Any, browser: webdriver.Chrome) -> None:
    url, seeded = console
    _sign_in(browser, url, TENANT_TOKEN)
    letters = _text(browser, "#dead-letter-table")
    assert seeded.tenant_letter_id in letters and seeded.dead_letter_id not in letters
    sessions = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#dead-letter-table td.session")]
    assert sessions == ["acme-dead"], sessions  # each letter's session, as `ovstream dlq list` shows it
    assert seeded.undecodable_id not in letters
    browser.get(f"{url}/console/session")
    listed = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#recent-table tr.recent td:first-child")]
    assert listed == [TENANT_SESSION]
    browser.get(f"{url}/console/session?key={KEY}")  # another tenant's session, by its key
    assert "No answer kept" in _text(browser, "main") and "No commits recorded" in _text(browser, "main")
    assert not browser.find_elements(By.ID, "answer-table")
    headers = {"authorization": f"Bearer {TENANT_TOKEN}"}
    theirs = httpx.get(f"{url}/v1/sessions/inspect", params={"sessionKey": KEY}, headers=headers).json()
    unknown = httpx.get(f"{url}/v1/sessions/inspect", params={"sessionKey": "agent:main:never"}, headers=headers)
    assert {k: v for k, v in theirs.items() if k not in ("ov_session_id", "session_key", "now")} == {
        k: v for k, v in unknown.json().items() if k not in ("ov_session_id", "session_key", "now")
    }  # answered as an unknown session is
    assert theirs["assembled"] is None and theirs["commits"] == []
    by_id = httpx.get(f"{url}/v1/sessions/inspect", params={"sessionId": OTHER_AGENT_SESSION}, headers=headers)
    assert by_id.json()["assembled"] is None
    mine = httpx.get(f"{url}/v1/sessions/inspect", params={"sessionId": TENANT_SESSION}, headers=headers).json()
    assert mine["assembled"] is not None and mine["tenant"] == "acme"
    recent = httpx.get(f"{url}/v1/sessions/recent", headers=headers).json()["sessions"]
    assert [r["ov_session_id"] for r in recent] == [TENANT_SESSION]
    assert not _errors(browser)


def test_a_viewer_may_look_but_not_act(console: Any, browser: webdriver.Chrome) -> None:
    url, seeded = console
    _sign_in(browser, url, VIEWER_TOKEN)
    assert seeded.dead_letter_id in _text(browser, "#dead-letter-table")
    assert not browser.find_elements(By.ID, "replay")  # no replay button for a viewer
    assert "Read-only" in _text(browser, "#dead-letter-table + p, form p")
    assert not _errors(browser)
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    refused = httpx.post(f"{url}/console/dead-letters/replay", data={"all": "1"}, cookies=cookies)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "read_only"
    assert _dead_letters(url) == 3


def test_a_wrong_token_is_refused_at_the_form(console: Any, browser: webdriver.Chrome) -> None:
    url, _ = console
    browser.get(f"{url}/console/login")
    browser.find_element(By.NAME, "token").send_keys("not-the-token-at-all")
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form[action='/console/login'] button"))
    assert "not valid" in _text(browser, "#message")
    browser.get(f"{url}/console/session")
    assert browser.current_url.endswith("/console/login")
