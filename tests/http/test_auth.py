import stat
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from memory_proxy.errors import AuthenticationFailed
from memory_proxy.http.auth import (
    USER_JWT_HEADER,
    KeyChecker,
    UserJwtVerifier,
    bearer_token,
    load_api_keys,
    read_user_id,
    signed_user_id,
)
from memory_proxy.settings import load_settings
from tests.support.fakes import JWT_SECRET, openwebui_token


def test_a_key_is_generated_once_stored_privately_and_reused(tmp_path: Path, capsys) -> None:
    server = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path)}).server
    (first,) = load_api_keys(server)
    assert first.startswith("mp-") and len(first) > 30
    assert first in capsys.readouterr().err  # printed once, on creation
    mode = stat.S_IMODE((tmp_path / "api_key").stat().st_mode)
    assert mode == 0o600
    assert load_api_keys(server) == (first,)
    assert first not in capsys.readouterr().err  # not printed again


def test_configured_keys_win_and_no_file_is_written(tmp_path: Path) -> None:
    server = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path),
                            "PROXY_API_KEYS": "key-one-0123456789, key-two-0123456789"}).server
    assert load_api_keys(server) == ("key-one-0123456789", "key-two-0123456789")
    assert not (tmp_path / "api_key").exists()


def test_key_checker() -> None:
    checker = KeyChecker(("key-one-0123456789", "key-two-0123456789"))
    assert checker.verify("key-two-0123456789")
    assert not checker.verify("key-two-012345678") and not checker.verify("")
    assert bearer_token("Bearer abc ") == "abc" and bearer_token("bearer abc") == "abc"
    assert bearer_token("Basic abc") == "" and bearer_token(None) == ""


# ---------------------------------------------------------------- OpenWebUI's signed user identity

def test_a_valid_openwebui_token_names_the_user() -> None:
    verifier = UserJwtVerifier(JWT_SECRET)
    assert signed_user_id({USER_JWT_HEADER: openwebui_token("user-a")}, verifier, "x-openwebui-user-id") == "user-a"
    assert signed_user_id({}, verifier, "x-openwebui-user-id") is None  # anonymous stays anonymous


@pytest.mark.parametrize("token", [
    openwebui_token(secret="another-secret-entirely-0123456789"),            # forged signature
    openwebui_token(exp=int(time.time()) - 60),                             # expired beyond the leeway
    openwebui_token(iss="someone-else"),                                    # wrong issuer
    openwebui_token(exp=None),                                              # no expiry
    openwebui_token(sub=""),                                                # nobody
    jwt.encode({"sub": "user-a", "iss": "open-webui", "exp": int(time.time()) + 60}, key=None,
               algorithm="none"),                                            # unsigned
    "not-a-jwt",
    openwebui_token(exp=str(int(time.time()) - 3600)),                     # a string: read as a number by PyJWT
    openwebui_token(exp=str(int(time.time()) + 60)),                       # a string, even in date
    openwebui_token(exp=True),                                              # a boolean
    openwebui_token(nbf="0"),                                               # a string "not before"
    openwebui_token(iat=[1]),                                               # a list "issued at"
    openwebui_token(padding="x" * 1_000_000),                              # 1 MB: refused before decoding
])
def test_bad_tokens_are_refused(token: str) -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        signed_user_id({USER_JWT_HEADER: token}, UserJwtVerifier(JWT_SECRET), "x-openwebui-user-id")
    assert refused.value.status_code == 401 and refused.value.code == "invalid_user_jwt"


def test_a_bare_user_header_is_refused_when_tokens_are_required() -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        signed_user_id({"x-openwebui-user-id": "user-b"}, UserJwtVerifier(JWT_SECRET), "x-openwebui-user-id")
    assert refused.value.code == "unsigned_user_id"


# ---------------------------------------------------------------- through the app

async def test_with_a_jwt_secret_the_token_names_the_user_and_a_forged_header_is_refused(
        env: dict, app_factory: Any, outside: Any, db: Any) -> None:
    from litestar.testing import AsyncTestClient
    from structlog.testing import capture_logs

    from tests.support.data import BUN, PROXY_KEY, RUNTIME_Q, USER_A, USER_B
    from tests.support.proxy import add_memory, chat_body, system_text
    from tests.support.proxy import sent_body as upstream_body

    await add_memory(db, USER_A, BUN)
    settings = load_settings({**env, "USER_JWT_SECRET": JWT_SECRET})
    app = app_factory(settings)
    async with AsyncTestClient(app, base_url="http://proxy.test") as client:
        client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        with capture_logs() as logs:
            forged = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q),
                                       headers={"x-openwebui-user-id": USER_A})
            wrong_key = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q),
                                          headers={USER_JWT_HEADER: openwebui_token(secret="another-secret-entirely-0123456789",
                                                                          sub=USER_A)})
            as_b = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q),
                                     headers={USER_JWT_HEADER: openwebui_token(sub=USER_B), "x-openwebui-user-id": USER_A})
            b_saw = system_text(upstream_body(outside))
            as_a = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q),
                                     headers={USER_JWT_HEADER: openwebui_token(sub=USER_A)})
            a_saw = system_text(upstream_body(outside))
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "unsigned_user_id"
    assert wrong_key.status_code == 401 and wrong_key.json()["error"]["code"] == "invalid_user_jwt"
    assert as_b.status_code == 200 and BUN not in b_saw  # the token wins over a header naming A
    assert as_a.status_code == 200 and BUN in a_saw and len(as_a.json()["memories"]) == 1
    assert outside.routes["chat"].call_count == 2  # refused turns never reached the upstream
    logged = repr(logs) + repr(settings)
    assert JWT_SECRET not in logged and PROXY_KEY not in logged


# ---------------------------------------------------------------- a user id, wherever it comes from

@pytest.mark.parametrize(("raw", "problem"), [
    ("", "is empty"), ("   ", "is empty"), ("x" * 256, "longer than 255"), ("a\x00b", "control characters"),
    ("a\ud800b", "control characters"), ("tab\there", "control characters"),
    ("team:platform", "names a team"), (" Team:platform", "names a team"),  # it would hold the team's memories
])
def test_an_unusable_user_id_is_refused_wherever_it_comes_from(raw: str, problem: str) -> None:
    from memory_proxy.errors import BadRequest
    from memory_proxy.http.auth import checked_user_id

    with pytest.raises(BadRequest, match=problem):
        checked_user_id(raw, "the x-openwebui-user-id header")


def test_user_headers_are_read_as_utf8_and_a_second_one_is_refused() -> None:
    """As the app gets them (Litestar's Headers from the ASGI scope): bytes, every occurrence kept."""
    from litestar.datastructures import Headers

    from memory_proxy.errors import BadRequest

    server = load_settings({}).server
    assert read_user_id(Headers([(b"x-openwebui-user-id", "café".encode())]), server) == "café"  # not cafÃ©
    with pytest.raises(BadRequest) as refused:
        read_user_id(Headers([(b"x-openwebui-user-id", b"user-a"), (b"x-openwebui-user-id", b"user-b")]), server)
    assert refused.value.code == "duplicate_header"
    assert read_user_id(Headers([(b"x-other", b"x")]), server) is None  # absent: anonymous


async def test_a_blank_user_header_is_a_400_not_an_anonymous_turn(client: Any) -> None:
    from tests.support.proxy import chat_body

    response = await client.post("/v1/chat/completions", json=chat_body("hi"), headers={"x-openwebui-user-id": "  "})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_user_id"


async def test_a_signed_subject_that_cannot_be_stored_is_refused_at_the_door(
        env: dict, app_factory: Any, outside: Any) -> None:
    """A `sub` with NUL passed the signature check and reached the job outbox, which could never store it."""
    from litestar.testing import AsyncTestClient

    from tests.support.data import PROXY_KEY
    from tests.support.proxy import chat_body

    settings = load_settings({**env, "USER_JWT_SECRET": JWT_SECRET})
    async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as client:
        response = await client.post("/v1/chat/completions", json=chat_body("I live in Lyon."), headers={
            "authorization": f"Bearer {PROXY_KEY}", USER_JWT_HEADER: openwebui_token("evil\x00user")})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_user_id"
    assert len(client.app.state.services.outbox) == 0


def test_a_jwt_secret_shorter_than_32_bytes_is_refused_at_start() -> None:
    from memory_proxy.settings import SettingsError

    with pytest.raises(SettingsError, match="USER_JWT_SECRET") as refused:
        load_settings({"USER_JWT_SECRET": "abc"})
    assert "abc" not in str(refused.value)  # a secret is never printed
    assert load_settings({"USER_JWT_SECRET": "x" * 32}).server.user_jwt_secret == "x" * 32
