"""The scripted user, and what the proxy says about them (its log, /metrics, the management API).

One person over a few "days" (a new chat per day): a name, a city, a job, a cat, a diet and a hobby said
among ordinary questions; then a move to another city and hospital (the old facts must be superseded,
with an audit row); last a NEW chat whose questions need the memories. Before each new chat the run waits
for the formation queue to drain (a day has passed), so that the move finds the old city stored.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


@dataclass(frozen=True)
class Step:
    chat: int       # a new chat starts when this changes
    text: str
    key: bool = False  # kept by every --turns: a fact the checks need, the move, the probes


SCRIPT = [
    Step(1, "Hi! I'm Camille. I live in Lyon and I work as a night-shift nurse at the Croix-Rousse hospital.", True),
    Step(1, "What's a good way to sleep during the day after a night shift?"),
    Step(1, "I have a cat called Pixel, she's three. Any tips to keep her busy while I sleep?", True),
    Step(1, "Can you give me a quick recipe for a light dinner before work?"),
    Step(1, "I'm vegetarian, by the way."),
    Step(1, "ok thanks"),
    Step(2, "I started bouldering last month, I go twice a week to a gym near Part-Dieu."),
    Step(2, "How do I avoid hurting my fingers when climbing?"),
    Step(2, "What should I eat after a climbing session?"),
    Step(2, "Write me a short message to my manager asking to swap my Friday shift."),
    Step(2, "Can you make it a bit more formal?"),
    Step(2, "Perfect, thank you!"),
    Step(3, "My sister Léa is visiting me next weekend."),
    Step(3, "What can we do in town on a rainy Saturday?"),
    Step(3, "Any board games for two people you'd recommend?"),
    Step(3, "Explain the rules of Patchwork briefly."),
    Step(3, "Give me an idea for a vegetarian brunch to cook at home."),
    Step(3, "thanks"),
    Step(4, "Big news: I just moved from Lyon to Grenoble! I now work at the Grenoble university hospital.", True),
    Step(4, "What should I do first after moving to a new city in France?"),
    Step(4, "How do I change my address for my health insurance card?"),
    Step(4, "Is the area good for climbing outdoors?"),
    Step(4, "Pixel hides under the bed since the move. Is that normal?"),
    Step(4, "ok"),
    Step(5, "I want to learn to ski this winter."),
    Step(5, "What gear do I need for a first ski lesson?"),
    Step(5, "How many lessons does a beginner usually need?"),
    Step(5, "Can you draft a weekly plan mixing bouldering and ski training?"),
    Step(6, "Remind me: which city do I live in now, and what is my cat called?", True),
    Step(6, "And where do I work?"),
]
# the probe chat (the last): what its replies and injected memories should hold, and what no active memory may
PROBE_EXPECT = [r"grenoble", r"pixel"]
NEW_CITY, OLD_CITY = r"grenoble", r"lyon"


def select(turns: int) -> list[Step]:
    """The key steps and the first others in order, ``turns`` in all (at least the key ones)."""
    keys = sum(s.key for s in SCRIPT)
    extra = max(0, turns - keys)
    chosen = []
    for step in SCRIPT:
        if step.key or extra > 0:
            extra -= 0 if step.key else 1
            chosen.append(step)
    return chosen


class ProxyView:
    """What memory-proxy exposes about the run: its JSON log lines, /metrics and the management API
    (the proxy key without an identity is an admin: ``?user=``)."""

    def __init__(self, base: str, key: str, log_path: Path) -> None:
        self.base, self.log_path = base, log_path
        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def lines(self, event: str, since: float = 0.0) -> list[dict[str, Any]]:
        """Log lines of ``event`` (``memory_retrieval``, ``memory_decision``…) logged at or after ``since``."""
        found = []
        for raw in self.log_path.read_text(errors="replace").splitlines():
            if f'"{event}"' not in raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if line.get("event") == event and epoch(line.get("timestamp")) >= since:
                found.append(line)
        return found

    def metrics(self) -> dict[str, float]:
        """``name{labels}`` → value, from /metrics (samples only)."""
        text = self.http.get("/metrics").text  # with the proxy key: /metrics asks for one
        return {name: float(value) for name, value in
                (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))}

    def export(self, user: str) -> dict[str, Any]:
        return dict(self.http.get("/api/v1/export", params={"user": user}).raise_for_status().json())

    def history(self, user: str, memory_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/api/v1/memories/{memory_id}/history",
                                  params={"user": user}).raise_for_status().json())

    def drain(self, timeout: float) -> float:
        """Wait until every formation job written so far is done, skipped or dead; seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            m = self.metrics()
            enqueued = total(m, "memory_proxy_jobs_total", event="enqueued")
            ended = sum(total(m, "memory_proxy_jobs_total", event=e) for e in ("completed", "skipped", "dead"))
            if ended >= enqueued:
                return time.monotonic() - started
            time.sleep(2)
        raise TimeoutError(f"formation jobs still pending after {timeout:.0f}s")


def total(metrics: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    found = 0.0
    for sample, value in metrics.items():
        base, _, rest = sample.partition("{")
        if base == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            found += value
    return found


def epoch(stamp: Any) -> float:
    if not isinstance(stamp, str):
        return 0.0
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def quantiles(values: list[float]) -> dict[str, float | None]:
    """p50, p95 and max (None without values)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 2), "p95": round(p95, 2),
            "max": round(ordered[-1], 2)}


def matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE) is not None
