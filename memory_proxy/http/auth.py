"""Caller authentication (the proxy's API keys, and where they come from) and the user's identity.

Keys come from PROXY_API_KEYS; when none is configured a key is generated on first start, stored in
the data dir (mode 0600) and printed once, so the proxy never runs open by accident. Presented keys are
compared as SHA-256 digests with `hmac.compare_digest` against every configured key (no early exit),
so neither the key nor the number of keys leaks through timing. Keys are never logged.

With USER_JWT_SECRET set (the value of OpenWebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET), the user is
whoever OpenWebUI's signed `X-OpenWebUI-User-Jwt` names (HS256, issuer "open-webui", `exp` required;
PyJWT checks signature, algorithm, expiry and issuer), and a bare user-id header is refused: anyone who
can reach the proxy with a key could otherwise read another user's memories by naming them.

A user id, wherever it comes from (header, signed token, `?user=`, the CLI), is checked by one rule,
`checked_user_id`: trimmed; empty or blank is an error (never "any user"); at most 255 characters; no
control characters, NUL or lone surrogates (PostgreSQL cannot store them, and a job that cannot be
stored must be refused at the door); never starting with "team:", which names a team's memories (a user
called that would hold them). A header is read as UTF-8 (HTTP carries bytes; `café` stays
`café`), and a user header sent twice is refused rather than silently taking one of them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

import jwt

from ..errors import AuthenticationFailed, BadRequest
from ..private_files import create_private, private_dir
from ..settings import ServerSettings
from ..store.teams import PRINCIPAL_PREFIX, Holder

MAX_USER_ID_LENGTH = 255
# Not in a one-line name (a user id, a team name): control characters, NUL, lone surrogates
NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def checked_user_id(raw: str, source: str) -> str:
    """A user id as every path takes it (see the module docstring); raises BadRequest naming `source`."""
    user_id = raw.strip()
    if not user_id:
        raise BadRequest(f"the user id ({source}) is empty", code="invalid_user_id")
    if len(user_id) > MAX_USER_ID_LENGTH:
        raise BadRequest(f"the user id ({source}) is longer than {MAX_USER_ID_LENGTH} characters",
                         code="invalid_user_id")
    if NOT_ONE_LINE.search(user_id):
        raise BadRequest(f"the user id ({source}) holds control characters", code="invalid_user_id")
    if Holder.reserved(user_id):
        raise BadRequest(f"the user id ({source}) starts with {PRINCIPAL_PREFIX!r}, which names a team's memories",
                         code="invalid_user_id")
    return user_id


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """One header's value read as UTF-8 (servers decode header bytes as Latin-1), or None when absent;
    a header sent more than once is refused. `headers`: Litestar's (every value) or a plain mapping."""
    getall = getattr(headers, "getall", None)
    values = getall(name, []) if getall else [v for v in [headers.get(name)] if v is not None]
    if len(values) > 1:
        raise BadRequest(f"the {name} header is sent {len(values)} times", code="duplicate_header")
    if not values:
        return None
    try:
        return str(values[0].encode("latin-1").decode("utf-8"))
    except UnicodeError:
        return str(values[0])  # already text beyond Latin-1, or not UTF-8: taken as it came

KEY_FILE = "api_key"
LOG_KEY_FILE = "log_user_id_key"  # LOG_USER_ID_KEY when unset: pseudonyms nobody else can recompute


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyChecker:
    def __init__(self, keys: tuple[str, ...]) -> None:
        if not keys:
            raise ValueError("at least one API key is required")
        self._digests = [_digest(k) for k in keys]

    def verify(self, presented: str) -> bool:
        candidate = _digest(presented)
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(candidate, digest)
        return matched


def stored_secret(path: Path, prefix: str = "") -> tuple[str, bool]:
    """The secret kept in `path` (mode 0600), made on first use; (secret, whether it was just made).
    Two processes starting at once agree: the file is created exclusively, the loser reads the winner's."""
    private_dir(path.parent, ours=False)  # the data dir
    try:
        fd = create_private(path)
    except FileExistsError:
        return path.read_text().strip(), False
    secret = prefix + secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    return secret, True


def load_api_keys(server: ServerSettings) -> tuple[str, ...]:
    if server.api_keys:
        return server.api_keys
    path = server.data_dir / KEY_FILE
    key, created = stored_secret(path, prefix="mp-")
    if created:
        print(f"memory-proxy: no PROXY_API_KEYS set, generated an API key (stored in {path}):\n"
              f"  {key}\nClients must send 'Authorization: Bearer <key>'.", file=sys.stderr, flush=True)
    return (key,)


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


USER_JWT_HEADER = "x-openwebui-user-jwt"
JWT_ISSUER = "open-webui"
JWT_LEEWAY_S = 10  # clock skew between OpenWebUI and us; its tokens live 300 s
JWT_MAX_CHARS = 4096  # OpenWebUI's tokens are ~200 characters; a bigger one is refused before decoding
TIME_CLAIMS = ("exp", "iat", "nbf")  # RFC 7519 NumericDate: PyJWT reads "9999999999" (a string) as a number


class UserJwtVerifier:
    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("the JWT secret is empty")
        self._secret = secret

    def user_id(self, token: str) -> str:
        if len(token) > JWT_MAX_CHARS:
            raise AuthenticationFailed(f"{USER_JWT_HEADER} is over {JWT_MAX_CHARS} characters",
                                       code="invalid_user_jwt")
        try:
            claims = jwt.decode(token, self._secret, algorithms=["HS256"], issuer=JWT_ISSUER,
                                leeway=JWT_LEEWAY_S, options={"require": ["exp", "iss", "sub"]})
        except jwt.InvalidTokenError as exc:
            raise AuthenticationFailed(f"invalid {USER_JWT_HEADER}: {exc}", code="invalid_user_jwt") from exc
        wrong = [c for c in TIME_CLAIMS if c in claims
                 and (isinstance(claims[c], bool) or not isinstance(claims[c], int | float))]
        if wrong:
            raise AuthenticationFailed(f"invalid {USER_JWT_HEADER}: {', '.join(wrong)} must be a number",
                                       code="invalid_user_jwt")
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject.strip():
            raise AuthenticationFailed(f"{USER_JWT_HEADER} names no user", code="invalid_user_jwt")
        return subject


def signed_user_id(headers: Mapping[str, str], verifier: UserJwtVerifier, user_id_header: str) -> str | None:
    """The user named by a valid signed token; None when neither a token nor a user header is sent."""
    token = header_value(headers, USER_JWT_HEADER)
    if token:
        return verifier.user_id(token)
    if header_value(headers, user_id_header) is not None:
        raise AuthenticationFailed(f"an unsigned {user_id_header} header is refused: this proxy only accepts "
                                   f"users named by a signed {USER_JWT_HEADER}", code="unsigned_user_id")
    return None


def read_user_id(headers: Mapping[str, str], server: ServerSettings) -> str | None:
    """Who the turn is for: the signed token's subject when USER_JWT_SECRET is set, else the user header;
    None (anonymous) when neither is sent. A sent but empty or unstorable id is a 400."""
    if server.user_jwt_secret:
        user_id = signed_user_id(headers, UserJwtVerifier(server.user_jwt_secret), server.user_id_header)
        source = f"the 'sub' of {USER_JWT_HEADER}"
    else:
        user_id = header_value(headers, server.user_id_header)
        source = f"the {server.user_id_header} header"
    return None if user_id is None else checked_user_id(user_id, source)
