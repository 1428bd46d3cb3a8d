"""A circuit breaker for the memory side: after repeated failures, stop trying for a while.

While the database is down, every chat turn would otherwise spend its whole retrieval budget (1.5 s)
finding that out. After `threshold` consecutive failures the breaker opens: turns skip the memory side
at once (relayed without memory, counted as `fail_open_total{reason="breaker_open"}`). After `cool_s`
one turn is let through to try (half-open): success closes the breaker, failure opens it again for
twice as long (up to `max_cool_s`). Ten lines of state rather than a library: pybreaker is sync and
thread-based, and nothing here needs more than a counter and a clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Breaker:
    def __init__(self, *, threshold: int = 3, cool_s: float = 5.0, max_cool_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold, self.base_cool_s, self.max_cool_s, self._clock = threshold, cool_s, max_cool_s, clock
        self._failures = 0
        self._cool_s = cool_s
        self._open_until = 0.0

    def allow(self) -> bool:
        """May a call go ahead now? In the half-open state one call goes and the next ones wait for it."""
        if self._failures >= self.threshold and self._clock() < self._open_until:
            return False
        if self._failures >= self.threshold:  # half-open: this call is the probe
            self._open_until = self._clock() + self._cool_s
        return True

    @property
    def failing(self) -> bool:
        """The last database call failed: a job write would likely wait out its timeout too."""
        return self._failures > 0

    def success(self) -> None:
        self._failures, self._cool_s, self._open_until = 0, self.base_cool_s, 0.0

    def failure(self) -> None:
        self._failures += 1
        if self._failures > self.threshold:  # the half-open probe failed: wait longer
            self._cool_s = min(self._cool_s * 2, self.max_cool_s)
        if self._failures >= self.threshold:
            self._open_until = self._clock() + self._cool_s
