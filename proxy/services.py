"""The long-lived resources one running app holds, built by the lifespan in app.py."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from .memory.embed import Embedder
from .settings import Settings
from .upstream import Upstream


@dataclass(frozen=True)
class Services:
    settings: Settings
    pool: AsyncConnectionPool
    upstream: Upstream
    embedder: Embedder
