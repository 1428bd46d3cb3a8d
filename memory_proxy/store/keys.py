"""Per-user API keys for the management API (memory_proxy/store/migrations/0006).

A secret is `mpk_<id>_<random>`, shown once by `create_key`; only its SHA-256 digest is stored. `key_owner`
finds the row by the id inside the secret and compares digests with `hmac.compare_digest`. A key with
`user_id` NULL is an admin key (acts for any user); any other acts only as its user.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from psycopg import AsyncConnection

PREFIX = "mpk_"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


async def create_key(conn: AsyncConnection[Any], *, user_id: str | None, label: str) -> tuple[str, str]:
    """A new key for `user_id`, or an admin key when `user_id` is None (only None: an empty id is an error,
    never an admin by accident); returns (key id, the secret: shown once, never stored)."""
    if user_id is not None and not user_id.strip():
        raise ValueError("an empty user id: pass a user, or ask for an admin key explicitly")
    key_id = secrets.token_hex(6)
    secret = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    await conn.execute("INSERT INTO api_keys (id, user_id, key_hash, label) VALUES (%s, %s, %s, %s)",
                       [key_id, user_id, _digest(secret), label])
    return key_id, secret


async def revoke_key(conn: AsyncConnection[Any], key_id: str) -> bool:
    """Revoke a key; False when no active key has this id."""
    cur = await conn.execute("UPDATE api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL",
                             [key_id])
    return cur.rowcount == 1


async def list_keys(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
    """Every key, newest first, without its secret (which is not stored anyway)."""
    cur = await conn.execute("SELECT id, user_id, label, created_at, revoked_at FROM api_keys"
                             " ORDER BY created_at DESC, id")
    return [{"id": r[0], "user_id": r[1], "label": r[2], "created_at": r[3], "revoked_at": r[4]}
            for r in await cur.fetchall()]


async def key_owner(conn: AsyncConnection[Any], secret: str) -> tuple[bool, str | None] | None:
    """(is_admin, user_id) for a valid, unrevoked key; None for an unknown, malformed or revoked one."""
    if not secret.startswith(PREFIX):
        return None
    key_id = secret[len(PREFIX):].split("_", 1)[0]
    cur = await conn.execute("SELECT key_hash, user_id FROM api_keys WHERE id = %s AND revoked_at IS NULL",
                             [key_id])
    row = await cur.fetchone()
    if row is None or not hmac.compare_digest(bytes(row[0]), _digest(secret)):
        return None
    return (row[1] is None, row[1])
