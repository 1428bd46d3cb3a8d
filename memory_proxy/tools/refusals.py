"""Models that refused our memory tools (an upstream answered 400 to a request carrying them: Ollama and some
servers do for a model without tool support), remembered in this process for a while so that their turns
are not sent twice."""

from __future__ import annotations

import time
from collections.abc import Callable

from cachetools import TTLCache

FORGET_AFTER_S = 600.0
MAX_MODELS = 1000  # names are the client's: a bounded map whatever they send


class ToolLessModels:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._models: TTLCache[str, bool] = TTLCache(maxsize=MAX_MODELS, ttl=FORGET_AFTER_S, timer=clock)

    def add(self, model: str) -> None:
        self._models[model] = True

    def __contains__(self, model: str) -> bool:
        return model in self._models
