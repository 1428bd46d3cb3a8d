"""Logs: one request id on every line of a request and in the `X-Request-Id` header (ours, always fresh; the
client's own id beside it as `client_request_id`); JSON lines; user ids."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import httpx
import pytest
import structlog

from memory_proxy.chat import outbox
from memory_proxy.http.request_id import client_request_id
from memory_proxy.observability import configure_logging, log, user_ref
from tests.support.data import CHAT, USER_A, USER_B
from tests.support.fakes import ScriptedStream, completion, stream_reply
from tests.support.proxy import add_memory, chat_body, user_headers

HEX_ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def enqueue_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line logged where the formation job is written (the end of the request, or of its stream)."""
    put = outbox.Outbox.put

    async def logging_put(self: outbox.Outbox, job: outbox.PendingJob, *, hold: bool = False) -> None:
        log.info("test_job_enqueued")
        await put(self, job, hold=hold)

    monkeypatch.setattr(outbox.Outbox, "put", logging_put)


async def test_every_line_of_a_chat_request_carries_the_request_id_of_its_header(
        client: Any, outside: Any, json_logs: Any, enqueue_logged: None) -> None:
    outside.routes["embeddings"].mock(side_effect=httpx.ConnectError("refused"))  # a retrieval warning line
    response = await client.post("/v1/chat/completions", json=chat_body("Where do I live?"),
                                 headers=user_headers(USER_A))
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    assert HEX_ID.fullmatch(request_id)
    lines = [line for line in json_logs() if line["event"] not in ("started", "stopped")]
    events = {line["event"] for line in lines}
    assert {"retrieval_fallback_recent", "test_job_enqueued"} <= events
    assert {line.get("request_id") for line in lines} == {request_id}


async def test_lines_of_a_streamed_body_carry_the_request_id(client: Any, outside: Any, json_logs: Any,
                                                             enqueue_logged: None) -> None:
    upstream = ScriptedStream([b'data: {"choices": [{"delta": {"content": "par"}}]}\n\n'],
                              fail=httpx.ReadError("connection reset"))
    outside.routes["chat"].mock(side_effect=lambda _: stream_reply(upstream))
    async with client.stream("POST", "/v1/chat/completions", json=chat_body("hi", stream=True),
                             headers=user_headers(USER_A, **{"x-request-id": "trace-42"})) as response:
        body = b"".join([part async for part in response.aiter_bytes()])
    request_id = response.headers["x-request-id"]
    assert b"dropped mid-reply" in body and HEX_ID.fullmatch(request_id)
    lines = {line["event"]: line for line in json_logs()}
    for event in ("upstream_stream_dropped", "test_job_enqueued"):  # from the streamed body; as the stream ended
        assert (lines[event]["request_id"], lines[event]["client_request_id"]) == (request_id, "trace-42")


async def test_a_client_s_id_is_logged_beside_ours_and_never_becomes_ours(client: Any, outside: Any,
                                                                           json_logs: Any) -> None:
    """A client could send another user's X-Request-Id: the lines of two users' requests then shared one id."""
    ids = []
    for headers in (user_headers(USER_A, **{"x-request-id": "shared-7"}), user_headers(USER_B, **{"x-request-id": "shared-7"})):
        response = await client.post(CHAT, json=chat_body("Hi"), headers=headers)
        ids.append(response.headers["x-request-id"])
    assert all(HEX_ID.fullmatch(request_id) for request_id in ids) and ids[0] != ids[1]
    lines = [line for line in json_logs() if line["event"] == "memory_retrieval"]
    assert [line["request_id"] for line in lines] == ids  # each user's line carries its own request's id
    assert [line["client_request_id"] for line in lines] == ["shared-7", "shared-7"]  # the client's, findable


async def test_a_sane_client_id_is_logged_and_an_insane_one_ignored(client: Any, outside: Any, json_logs: Any) -> None:
    for client_id in ("abc-123", "0f.a_b-C", "x" * 128, "has space", "x" * 129, "<script>", "ünïcode".encode(), ""):
        response = await client.post(CHAT, json=chat_body("Hi"), headers=user_headers(USER_A, **{"x-request-id": client_id}))
        assert HEX_ID.fullmatch(response.headers["x-request-id"])
    logged = [line.get("client_request_id") for line in json_logs() if line["event"] == "memory_retrieval"]
    assert logged == ["abc-123", "0f.a_b-C", "x" * 128, None, None, None, None, None]


async def test_error_replies_carry_the_request_id_too(client: Any, outside: Any) -> None:
    unauthorized = await client.get("/v1/models", headers={"authorization": "Bearer wrong"})
    missing = await client.get("/nowhere")
    bad = await client.post("/v1/chat/completions", content=b"{not json", headers={"x-request-id": "bad-1"})
    assert unauthorized.status_code == 401 and HEX_ID.fullmatch(unauthorized.headers["x-request-id"])
    assert missing.status_code == 404 and HEX_ID.fullmatch(missing.headers["x-request-id"])
    assert bad.status_code == 400 and HEX_ID.fullmatch(bad.headers["x-request-id"])


async def test_the_request_id_ends_with_its_request(client: Any, outside: Any, json_logs: Any) -> None:
    await client.get("/healthz", headers={"x-request-id": "gone-after"})
    log.info("after_request")
    (line,) = [line for line in json_logs() if line["event"] == "after_request"]
    assert "request_id" not in line and "client_request_id" not in line


def test_the_client_s_id_from_headers() -> None:
    assert client_request_id([(b"x-request-id", b"a.b_c-1")]) == "a.b_c-1"
    assert client_request_id([(b"x-request-id", b"gw-1"), (b"x-client-request-id", b"sdk-1")]) == "sdk-1"  # OpenAI's
    assert client_request_id([(b"x-request-id", b"a b")]) is None
    assert client_request_id([]) is None


def test_user_ids_are_logged_as_keyed_hashes_unless_raw(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        configure_logging("info", "json", user_id_key="k1")
        log.info("memory_decision", user_id="alice@example.com", job_id=7)
        configure_logging("info", "json", user_id_key="k2")
        log.info("memory_decision", user_id="alice@example.com", job_id=7)
        configure_logging("info", "json", user_ids="raw")
        log.info("memory_decision", user_id="alice@example.com", job_id=7)
    finally:
        structlog.reset_defaults()
    first, second, raw = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert first["user_id"] == user_ref("alice@example.com", "k1") and re.fullmatch(r"[0-9a-f]{16}", first["user_id"])
    assert second["user_id"] != first["user_id"]  # keyed: without the key, a pseudonym cannot be recomputed
    assert raw["user_id"] == "alice@example.com" and raw["job_id"] == 7
    assert "alice" not in first["user_id"] + second["user_id"]


def test_console_format_is_readable_and_json_format_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        configure_logging("info", "console")
        log.info("hello_console", answer=42)
        configure_logging("info", "json")
        log.info("hello_json", answer=42)
    finally:
        structlog.reset_defaults()
    console, as_json = capsys.readouterr().err.splitlines()
    assert "hello_console" in console and "answer=42" in console and not console.startswith("{")
    assert json.loads(as_json)["event"] == "hello_json" and json.loads(as_json)["level"] == "info"


def test_libraries_lines_are_json_lines_too(capsys: pytest.CaptureFixture[str]) -> None:
    """psycopg's pool logs through stdlib logging when the database restarts: one JSON object per line too."""
    try:
        configure_logging("info", "json")
        logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "memory-proxy", "refused")
    finally:
        structlog.reset_defaults()
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["event"] == "error connecting in 'memory-proxy': refused"
    assert record["level"] == "warning" and record["logger"] == "psycopg.pool"


def test_fact_text_can_be_kept_out_of_the_decision_logs(capsys: pytest.CaptureFixture[str]) -> None:
    """LOG_MEMORY_TEXT=false: an erase cannot reach logs, so they need not hold what users said."""
    decision = {"decisions": [{"fact": "User lives in Lyon.", "action": "add", "memory_id": "m1"}],
                "dropped": [{"fact": "User banks at evil.example.", "why": "unsupported"}]}
    try:
        configure_logging("info", "json", memory_text=False)
        log.info("memory_decision", user_id="alice", **decision)
        configure_logging("info", "json")
        log.info("memory_decision", user_id="alice", **decision)
    finally:
        structlog.reset_defaults()
    without, with_text = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert without["decisions"] == [{"fact": 19, "action": "add", "memory_id": "m1"}]
    assert without["dropped"] == [{"fact": 27, "why": "unsupported"}]
    assert "Lyon" not in json.dumps(without) and "Lyon" in json.dumps(with_text)


def test_without_a_configured_key_pseudonyms_use_a_generated_one_kept_in_the_data_dir(tmp_path: Any) -> None:
    """With LOG_USER_ID_KEY unset, pseudonyms used a fixed key: anyone could recompute one from an id."""
    from memory_proxy.cli.common import log_user_id_key
    from memory_proxy.settings import load_settings

    settings = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path)})
    first, second = log_user_id_key(settings), log_user_id_key(settings)
    assert len(first) >= 32 and first == second == (tmp_path / "log_user_id_key").read_text().strip()
    assert (tmp_path / "log_user_id_key").stat().st_mode & 0o777 == 0o600
    other = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path / "elsewhere")})
    assert log_user_id_key(other) != first  # not a constant
    assert log_user_id_key(load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path), "LOG_USER_ID_KEY": "k"})) == "k"


async def test_a_relayed_reply_carries_one_request_id_and_the_upstream_s_under_its_own_name(
        client: Any, outside: Any) -> None:
    """Issue 26: the upstream's X-Request-Id was relayed beside ours, two headers of one name."""
    outside.routes["chat"].respond(200, json=completion(), headers={"x-request-id": "upstream-7"})
    response = await client.post(CHAT, json=chat_body("Hi"), headers=user_headers(USER_A, **{"x-request-id": "client-1"}))
    [ours] = response.headers.get_list("x-request-id")
    assert HEX_ID.fullmatch(ours)
    assert response.headers["x-upstream-request-id"] == "upstream-7"


async def test_each_identified_turn_logs_one_memory_retrieval_line(client: Any, outside: Any, db: Any,
                                                                    json_logs: Any) -> None:
    """Issue 26: at info level the operator sees, per chat turn, what was injected (and why nothing was)."""
    memory_id = await add_memory(db, USER_A, "User lives in Lyon.")
    await client.post(CHAT, json=chat_body("Where do I live?"), headers=user_headers(USER_A))
    await client.post(CHAT, json=chat_body("Hi"))  # no user: no retrieval, no line
    [line] = [entry for entry in json_logs() if entry["event"] == "memory_retrieval"]
    assert line["level"] == "info" and line["outcome"] == "hit" and line["count"] == 1
    assert line["ids"] == [memory_id] and isinstance(line["ms"], float)
    assert line["user_id"] != USER_A and len(line["user_id"]) == 16  # a pseudonym, as LOG_USER_IDS says

    outside.routes["embeddings"].mock(side_effect=httpx.ConnectError("refused"))  # recent memories stand in
    await client.post(CHAT, json=chat_body("What is my favourite colour?"), headers=user_headers(USER_A))
    [fallback] = [entry for entry in json_logs() if entry["event"] == "memory_retrieval"]
    assert (fallback["outcome"], fallback["ids"], fallback["reason"]) == ("hit", [memory_id], "embedder_error")
