"""Builders of recall hits for the recall tests."""

from __future__ import annotations

from core.recall.hits import RecallHit

MEM = "viking://user/u1/memories"


def hit(name: str, score: float, level: int | None = 2, abstract: str | None = None, **kw: object) -> dict:
    return {
        "uri": f"{MEM}/{name}",
        "level": level,
        "score": score,
        "abstract": abstract if abstract is not None else f"abstract of {name}",
        "context_type": "memory",
        **kw,
    }


def names(hits: list[RecallHit]) -> list[str]:
    return [h.uri.removeprefix(MEM + "/") for h in hits]
