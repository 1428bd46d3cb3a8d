"""A circuit breaker for a part of the memory side: after repeated failures, stop trying it for a while.

One mechanism, one instance per part (services.py). While the database is down, every chat turn would
otherwise spend its whole retrieval budget (1.5 s) finding that out; while the embedder hangs, every memory
turn its embedding share (1.05 s). After `threshold` consecutive failures the breaker opens: turns skip that
part at once — the database: relayed without memory (`fail_open_total{reason="breaker_open"}`); the embedder:
the most recent memories instead of a search (`reason="embedder_breaker_open"`, retrieval/retrieve.py). After
`cool_s` one turn is let through to try (half-open): success closes the breaker, failure opens it again for
twice as long (up to `max_cool_s`). Opening and closing are logged (`breaker_opened`, `breaker_closed`) and
shown by `memory_proxy_breaker_open{part}`. A counter and a clock rather than a library: pybreaker is sync
and thread-based, and nothing here needs more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .observability import BREAKER_OPEN, log


class Breaker:
    def __init__(self, part: str = "database", *, threshold: int = 3, cool_s: float = 5.0, max_cool_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.part, self.threshold, self.base_cool_s, self.max_cool_s = part, threshold, cool_s, max_cool_s
        self.clock = clock
        self._failures = 0
        self._cool_s = cool_s
        self._open_until = 0.0
        self._probing = False  # a half-open probe is out: its failure doubles the cool-down
        BREAKER_OPEN.labels(part).set(0)  # shown closed from the start (a series appears only once set)

    def allow(self) -> bool:
        """May a call go ahead now? In the half-open state one call goes and the next ones wait for it."""
        if self._failures >= self.threshold and self.clock() < self._open_until:
            return False
        if self._failures >= self.threshold:  # half-open: this call is the probe
            self._open_until = self.clock() + self._cool_s
            self._probing = True
        return True

    @property
    def failing(self) -> bool:
        """The last call failed: another call (a job write, for the database) would likely wait out its timeout too."""
        return self._failures > 0

    def success(self) -> None:
        if self._failures >= self.threshold:
            BREAKER_OPEN.labels(self.part).set(0)
            log.info("breaker_closed", part=self.part)
        self._failures, self._cool_s, self._open_until, self._probing = 0, self.base_cool_s, 0.0, False

    def failure(self) -> None:
        """A failed call. Calls that were already under way when the breaker opened (many, under load) keep it
        open; only a failed probe doubles the cool-down."""
        self._failures += 1
        opening = self._failures == self.threshold or self._probing
        if self._probing:
            self._probing = False
            self._cool_s = min(self._cool_s * 2, self.max_cool_s)
        if self._failures >= self.threshold:
            self._open_until = max(self._open_until, self.clock() + self._cool_s)
        if opening:
            BREAKER_OPEN.labels(self.part).set(1)
            log.warning("breaker_opened", part=self.part, failures=self._failures, retry_in_s=self._cool_s)
