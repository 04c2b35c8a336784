"""The demo's replay: the sample conversation driven through ovstream as OpenClaw would.

Per turn: the transform-context assemble (auto-recall on the new user
message), the main assemble (with ``prompt`` / ``availableTools``), then
afterTurn (``publish_turn`` with the whole transcript and
``prePromptMessageCount``), waiting until capture has the turn in OV and
saying when a commit was enqueued. Then it waits on phase 2 of every
commit, and fetches what assemble returns now: the main assemble of the
session and an auto-recall assemble in a new session.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from core.config import Settings
from core.events import CommitOutcome, TurnEvent
from core.ids import ov_session_id, resolve_agent_id
from core.ov.client import OVClient, OVError
from core.ov.layout import USER_MEMORIES_URI
from core.session import SessionAddress
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.dev.demo_report import Progress, memory_count, recall_block, summary_text
from workers.store.applied import parse_id
from workers.store.snapshots import parse_stored, snapshot_key
from workers.store.streams import publish_turn

CAPTURE_WAIT_S = 60.0
"""Longest wait for capture to apply one turn (a hang guard: it takes milliseconds)."""
PHASE2_WAIT_MARGIN_S = 30.0
"""Waiting on phase 2 gives up this long after ``phase2_deadline_s`` (the poller records a timeout first)."""
POLL_S = 0.05
RECALL_INDEX_WAIT_S = 10.0
"""How long the recall assemble is retried while OV indexes freshly extracted memories."""
TOKEN_BUDGET = 128_000

Say = Callable[[str], None]


class DemoFailure(RuntimeError):
    """A step of the demo failed; the message says which and why."""


class DemoInterrupted(DemoFailure):
    """Ctrl-C or SIGTERM during the replay."""


@dataclass(frozen=True)
class Sample:
    session_key: str
    agent_id: str | None
    turns: list[tuple[str, str]]
    recall_question: str


def load_sample(path: str | Path) -> Sample:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        turns = [(str(t["user"]), str(t["assistant"])) for t in raw["turns"]]
        return Sample(str(raw["sessionKey"]), raw.get("agentId"), turns, str(raw["recallQuestion"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DemoFailure(f"cannot read the sample conversation {path}: {exc}") from exc


@dataclass
class DemoResult:
    session_id: str
    session_key: str
    ov_session_id: str
    agent_id: str
    main: dict[str, Any] | None = None
    recall: dict[str, Any] | None = None
    recall_session_id: str | None = None
    outcomes: list[CommitOutcome] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": int(time.time() * 1000)}


def _assistant(text: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stopReason": "stop",
        "timestamp": int(time.time() * 1000),
    }


class Replay:
    """One run of the sample against a running ovstream (its RPC at ``rpc``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        rpc: httpx.AsyncClient,
        redis: Any,
        ov: OVClient,
        sample: Sample,
        say: Say,
        stopped: Callable[[], bool] = lambda: False,
        progress: Progress | None = None,
    ) -> None:
        self.settings = settings
        self.rpc = rpc
        self.redis = redis
        self.sample = sample
        self.say = say
        self.progress = progress or Progress()
        self.stopped = stopped
        # A fresh OpenClaw sessionId (a UUID, so it is the OV session id) each run:
        # a Redis or OV kept from an earlier run never mixes the two.
        self.session_id = str(uuid.uuid4())
        self.ov_session_id = ov_session_id(self.session_id, sample.session_key)
        self.agent_id = resolve_agent_id(sample.session_key, sample.agent_id, settings.agent_prefix)
        self.ov = ov.scoped(peer=self.agent_id)
        self.result = DemoResult(self.session_id, sample.session_key, self.ov_session_id, self.agent_id)
        self._seen_commits: set[str] = set()

    def check_stop(self) -> None:
        if self.stopped():
            raise DemoInterrupted("interrupted")

    # --- RPC ------------------------------------------------------------------------------

    def _identity(self, session_id: str, session_key: str) -> dict[str, Any]:
        return {
            "sessionId": session_id,
            "sessionKey": session_key,
            "runtimeContext": {"agentId": self.sample.agent_id} if self.sample.agent_id else None,
        }

    async def assemble(self, body: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            r = await self.rpc.post("/v1/assemble", json=body)
        except httpx.HTTPError as exc:
            raise DemoFailure(f"{what}: the RPC did not answer: {exc!r}") from exc
        if r.status_code != 200:
            raise DemoFailure(f"{what}: assemble answered HTTP {r.status_code}: {r.text[:300]}")
        answer: dict[str, Any] = r.json()
        return answer

    # --- the steps --------------------------------------------------------------------------

    async def run(self) -> DemoResult:
        s, sample = self.settings, self.sample
        self.say(
            f"session: sessionId {self.session_id} (OV session {self.ov_session_id}), "
            f"sessionKey {sample.session_key}, agent {self.agent_id}"
        )
        self.say(
            f"replaying {len(sample.turns)} turns; commitTokenThreshold {s.commit_token_threshold}, "
            f"commitKeepRecentCount {s.commit_keep_recent_count}, phase-2 poll every "
            f"{s.phase2_poll_interval_s:g} s"
        )
        transcript: list[dict[str, Any]] = []
        for i, (user_text, assistant_text) in enumerate(sample.turns, 1):
            self.check_stop()
            await self.turn(i, transcript, user_text, assistant_text)
        await self.wait_phase2()
        await self.final_assembles(transcript)
        self.result.outcomes = self.commits()
        await self.check()
        return self.result

    async def turn(self, i: int, transcript: list[dict[str, Any]], user_text: str, assistant_text: str) -> None:
        n = len(self.sample.turns)
        identity = self._identity(self.session_id, self.sample.session_key)
        pre_prompt = len(transcript)
        transcript.append(_user(user_text))
        recalled = await self.assemble(
            {**identity, "messages": transcript, "tokenBudget": TOKEN_BUDGET}, f"turn {i} transform-context assemble"
        )
        block = recall_block(recalled.get("messages") or [])
        recall_note = f"{memory_count(block)} memories injected" if block else "nothing injected"
        main = await self.assemble(
            {
                **identity,
                "messages": transcript,
                "tokenBudget": TOKEN_BUDGET,
                "prompt": user_text,
                "availableTools": [],
            },
            f"turn {i} main assemble",
        )
        has_summary = summary_text(main.get("messages") or []) is not None
        self.say(
            f"turn {i}/{n}: assemble: recall {recall_note}; main call "
            f"{len(main.get('messages') or [])} messages, {main.get('estimatedTokens')} tokens"
            f"{', with [Session History Summary]' if has_summary else ''}"
        )
        transcript.append(_assistant(assistant_text))
        event = TurnEvent(
            event_id=uuid.uuid4().hex,
            session_id=self.session_id,
            session_key=self.sample.session_key,
            agent_id=self.sample.agent_id,
            messages=list(transcript),
            pre_prompt_message_count=pre_prompt,
            token_budget=TOKEN_BUDGET,
            published_at=time.time(),
        )
        stream_id = publish_turn(self.redis, self.settings, event)
        self.say(
            f"turn {i}/{n}: afterTurn published ({len(transcript)} messages, "
            f"prePromptMessageCount {pre_prompt}) as stream entry {stream_id}"
        )
        await self.wait_captured(i, stream_id, len(transcript))
        for outcome in self.commits():
            if outcome.commit_id not in self._seen_commits:
                self._seen_commits.add(outcome.commit_id)
                self.say(
                    f"turn {i}/{n}: commit {outcome.commit_id} enqueued ({outcome.reason}: "
                    f"pending tokens reached {self.settings.commit_token_threshold})"
                )

    async def wait_captured(self, i: int, stream_id: str, count: int) -> None:
        """Until the session's snapshot reflects the entry (capture wrote it, then refreshed)."""
        target = parse_id(stream_id)
        deadline = time.monotonic() + CAPTURE_WAIT_S
        while True:
            self.check_stop()
            address = SessionAddress(self.ov_session_id, self.agent_id, None)
            snap = parse_stored(self.redis.hget(snapshot_key(self.settings, address), "data"))
            if snap is not None and parse_id(snap.applied_stream_id) >= target and snap.captured_through >= count:
                break
            if time.monotonic() > deadline:
                raise DemoFailure(
                    f"turn {i}: capture did not apply stream entry {stream_id} within "
                    f"{CAPTURE_WAIT_S:g} s (is a capture worker running? see the log)"
                )
            await asyncio.sleep(POLL_S)
        state = ""
        try:
            session = await self.ov.get_session(self.ov_session_id)
            state = f": OV session has {session.message_count} active messages, pending_tokens {session.pending_tokens}"
        except OVError as exc:
            state = f" (OV session state unreadable: {exc})"
        self.say(f"turn {i}/{len(self.sample.turns)}: captured{state}")

    def commits(self) -> list[CommitOutcome]:
        return CommitRecords(self.redis, self.settings).list(SessionAddress(self.ov_session_id, self.agent_id))

    async def wait_phase2(self) -> None:
        if not self.commits():
            return
        deadline = time.monotonic() + self.settings.phase2_deadline_s + PHASE2_WAIT_MARGIN_S
        while True:
            self.check_stop()
            waiting = [o for o in self.commits() if o.status not in FINAL_STATUSES]
            if not waiting:
                self.progress.end()
                break
            now = time.monotonic()
            state = "; ".join(f"commit {o.commit_id} {o.status}" for o in waiting)
            oldest = max(0.0, time.time() - min(o.requested_at for o in waiting))
            self.progress.update(f"waiting on phase 2: {state}, {oldest:.0f} s", state)
            if now > deadline:
                self.progress.end()
                raise DemoFailure(
                    f"phase 2 of {', '.join(o.commit_id for o in waiting)} not recorded "
                    f"within {self.settings.phase2_deadline_s + PHASE2_WAIT_MARGIN_S:g} s"
                )
            await asyncio.sleep(POLL_S * 5)
        for o in self.commits():
            memories = "" if o.memories_extracted is None else f", {o.memories_extracted} memories extracted"
            error = f" ({o.error})" if o.error else ""
            self.say(f"commit {o.commit_id}: {o.status}{memories}{error}")

    async def final_assembles(self, transcript: list[dict[str, Any]]) -> None:
        self.check_stop()
        sample = self.sample
        self.result.main = await self.assemble(
            {
                **self._identity(self.session_id, sample.session_key),
                "messages": transcript,
                "tokenBudget": TOKEN_BUDGET,
                "prompt": sample.recall_question,
                "availableTools": [],
            },
            "final main assemble",
        )
        recall_sid = str(uuid.uuid4())
        self.result.recall_session_id = recall_sid
        request = {
            **self._identity(recall_sid, f"{sample.session_key}:recall-demo"),
            "messages": [_user(sample.recall_question)],
            "tokenBudget": TOKEN_BUDGET,
        }
        extracted = sum(o.memories_extracted or 0 for o in self.commits())
        # OV makes a new memory searchable a moment after its task reports completed:
        # when memories were extracted, give the index a few seconds before concluding.
        deadline = time.monotonic() + (RECALL_INDEX_WAIT_S if extracted else 0)
        while True:
            self.result.recall = await self.assemble(request, "auto-recall assemble in a new session")
            if recall_block(self.result.recall.get("messages") or []) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S * 5)

    async def check(self) -> None:
        r, s = self.result, self.settings
        if not r.outcomes:
            r.failures.append(
                f"no commit was enqueued: the sample's pending tokens stayed under "
                f"commitTokenThreshold {s.commit_token_threshold} (try --commit-threshold)"
            )
        for o in r.outcomes:
            if o.status != "completed":
                r.failures.append(f"commit {o.commit_id} ended {o.status}: {o.error or 'no error recorded'}")
        if r.main is not None and summary_text(r.main.get("messages") or []) is None and r.outcomes:
            r.failures.append("the main assemble has no [Session History Summary] although a commit ran")
        extracted = sum(o.memories_extracted or 0 for o in r.outcomes)
        if r.recall is not None and recall_block(r.recall.get("messages") or []) is None:
            r.notes.append(
                f"auto-recall injected nothing ({extracted} memories were extracted); " + await self.best_recall_score()
            )

    async def best_recall_score(self) -> str:
        """Why recall found nothing: the best memory score for the question, against the threshold."""
        try:
            found = await self.ov.find(
                self.sample.recall_question, target_uri=USER_MEMORIES_URI, limit=10, score_threshold=0
            )
        except OVError as exc:
            return f"searching {USER_MEMORIES_URI} failed: {exc}"
        leaves = [h for h in found.memories if h.level in (None, 2)]
        if not leaves:
            return f"{USER_MEMORIES_URI} holds no memory"
        best = max(leaves, key=lambda h: h.score)
        return (
            f"the best memory scores {best.score:.3f} for the question, under recallScoreThreshold "
            f"{self.settings.recall_score_threshold:g} ({best.uri})"
        )
