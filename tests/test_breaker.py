"""The memory side's circuit breaker (proxy/breaker.py), on a clock the test moves; its use by the chat
path (a down database skipped after three failures) is in test_services.py."""

from __future__ import annotations

from proxy.breaker import Breaker


def test_the_breaker_opens_lets_one_probe_through_after_the_cool_down_and_backs_off() -> None:
    now = [0.0]
    breaker = Breaker(threshold=3, cool_s=5, max_cool_s=20, clock=lambda: now[0])
    for _ in range(3):
        assert breaker.allow()
        breaker.failure()
    assert not breaker.allow()  # open
    now[0] = 5.0
    assert breaker.allow()  # half-open: one probe …
    assert not breaker.allow()  # … and only one
    breaker.failure()  # the probe failed: open again, for longer
    now[0] = 14.0
    assert not breaker.allow()
    now[0] = 15.0
    assert breaker.allow()
    breaker.success()  # closed
    assert all(breaker.allow() for _ in range(5))


def test_a_success_before_the_threshold_resets_the_count() -> None:
    breaker = Breaker(threshold=3, clock=lambda: 0.0)
    for _ in range(2):
        breaker.failure()
    breaker.success()
    for _ in range(2):
        breaker.failure()
    assert breaker.allow()  # 2 + 2 failures, not 4 in a row
