"""Requests a process admits without asking PostgreSQL (migration 0021): while a subject is far from every limit
(more than 8 × max_connections requests, and places at once, away), an admission counts SPARE requests more in its
10-second step and holds places at once for them in this process's block lease; until that step ends this
process admits that many more of the subject on its own. The tokens they spend and the places they no longer
hold are settled every SETTLE_S (`settling`). Counted up front, a reserve only ever refuses more, never admits
more: what it does not use is counted all the same, and it stops where a limit comes near.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..store.limits import Limit

SPARE = 7  # requests reserved beside one admission: a subject far from its limits asks once in 8 (0021's most)
SETTLE_S = 1.0


@dataclass
class Held:
    """What this process holds of one subject."""

    spare: int = 0  # requests counted in the step that ends at `until`, not yet admitted
    until: float = 0.0  # (monotonic)
    places: int = 0  # its block lease's places at once, as this process last set them
    in_use: int = 0  # requests admitted on the reserve, not yet ended
    tokens: int = 0  # what those spent, not yet counted


@dataclass(frozen=True, slots=True)
class Settlement:
    """What one settling sends: per subject, its tokens since the last, and the places its block keeps."""

    kinds: list[str]
    subjects: list[str]
    tokens: list[int]
    places: list[int]


class Reserves:
    def __init__(self) -> None:
        self.block = uuid.uuid4()  # this process's block lease (its request id in limit_leases)
        self._held: dict[tuple[str, str], Held] = {}

    def take(self, limits: Sequence[Limit]) -> bool:
        """One request admitted here when every subject has a request of its step left and, where requests at once
        are limited, a free place in the block."""
        now = time.monotonic()
        found = [self._held.get((lim.kind, lim.subject)) for lim in limits]
        for lim, held in zip(limits, found, strict=True):
            if held is None or held.spare <= 0 or held.until <= now:
                return False
            if lim.concurrent is not None and held.in_use >= held.places:
                return False
        for held in found:
            assert held is not None
            held.spare -= 1
            held.in_use += 1
        return True

    def forget_spare(self) -> None:
        """No request more without asking (the limits changed); those counted stay counted."""
        for held in self._held.values():
            held.spare = 0

    def in_use(self, limits: Sequence[Limit]) -> list[int]:
        return [held.in_use if (held := self._held.get((lim.kind, lim.subject))) else 0 for lim in limits]

    def granted(self, limits: Sequence[Limit], in_use: Sequence[int], spare: int, step_left: float) -> None:
        """An admission that came with `spare` requests more of a step ending in `step_left` s, its block grown to
        `in_use` (as asked) + 1 + `spare` places; the request itself now holds one."""
        now = time.monotonic()
        for lim, used in zip(limits, in_use, strict=True):
            held = self._held.setdefault((lim.kind, lim.subject), Held())
            held.spare = (held.spare if held.until > now else 0) + spare
            held.until = now + step_left
            if lim.concurrent is not None:
                held.places = max(held.places, used + 1 + spare)
            held.in_use += 1

    def ended(self, subjects: Iterable[tuple[str, str]], tokens: int) -> None:
        """A request admitted on the reserve has ended: its place free, its tokens to settle."""
        for key in subjects:
            held = self._held.get(key)
            if held is not None:
                held.in_use -= 1
                held.tokens += tokens

    def settling(self) -> Settlement:
        """What to settle now: the places each block keeps are set to those in use at once (here, before any
        other admission can grow them, so that the settlement never takes back a place in use)."""
        now = time.monotonic()
        settled = Settlement([], [], [], [])
        for (kind, subject), held in list(self._held.items()):
            keeps = held.in_use if held.places else 0  # no places: no block (no limit on requests at once)
            if held.tokens or held.places != keeps:
                settled.kinds.append(kind)
                settled.subjects.append(subject)
                settled.tokens.append(held.tokens)
                settled.places.append(keeps)
                held.tokens, held.places = 0, keeps
            if not held.in_use and held.until <= now:
                del self._held[(kind, subject)]
        return settled

    def unsettled(self, settlement: Settlement) -> None:
        """A settlement that failed: its tokens counted at the next (the places it gave back stay given back
        here; PostgreSQL counts them until a settlement succeeds, which only refuses more)."""
        for kind, subject, tokens in zip(settlement.kinds, settlement.subjects, settlement.tokens, strict=True):
            self._held.setdefault((kind, subject), Held()).tokens += tokens

    def returned(self) -> Settlement:
        """Everything given back (the process stops): every block deleted, the tokens spent so far counted."""
        settled = Settlement([], [], [], [])
        for (kind, subject), held in self._held.items():
            settled.kinds.append(kind)
            settled.subjects.append(subject)
            settled.tokens.append(held.tokens)
            settled.places.append(0)
        self._held.clear()
        return settled
