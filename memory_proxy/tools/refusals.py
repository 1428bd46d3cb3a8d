"""Models that refused our memory tools (an upstream answered 400 to a request carrying them: Ollama and some
servers do for a model without tool support), remembered in this process for a while so that their turns
are not sent twice."""

from __future__ import annotations

import time
from collections.abc import Callable

FORGET_AFTER_S = 600.0
MAX_MODELS = 1000  # names are the client's: a bounded map whatever they send


class ToolLessModels:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._until: dict[str, float] = {}
        self._clock = clock

    def add(self, model: str) -> None:
        if len(self._until) >= MAX_MODELS:
            now = self._clock()
            self._until = {m: t for m, t in self._until.items() if t > now}
            if len(self._until) >= MAX_MODELS:
                self._until.pop(next(iter(self._until)))
        self._until[model] = self._clock() + FORGET_AFTER_S

    def __contains__(self, model: str) -> bool:
        until = self._until.get(model)
        if until is None:
            return False
        if until <= self._clock():
            del self._until[model]
            return False
        return True
