"""LOG_MEMORY_TEXT=false keeps the text of facts and model replies out of every log line (memory_proxy/log_text.py):
ours and the libraries' (instructor logs an unreadable reply's start and end; an SDK's error quotes the
server's error body), and the text of exceptions and tracebacks."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from memory_proxy.formation.worker import Worker
from memory_proxy.job_payload import FormationPayload
from memory_proxy.log_text import WITHHELD
from memory_proxy.observability import configure_logging, log
from memory_proxy.store import jobs
from tests.support.data import USER_A

MARKER = "quokka-flowerpot-7"  # a fact only the model's reply (or the server's error body) holds


@pytest.fixture
def stderr_text(capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """Every line written to stderr (structlog's and stdlib's) with LOG_MEMORY_TEXT=false, as JSON lines."""
    configure_logging("info", "json", memory_text=False)
    capsys.readouterr()
    yield lambda: capsys.readouterr().err
    structlog.reset_defaults()


HOSTILE = {
    "an unreadable reply": lambda memory_llm, outside: memory_llm.raw.update(
        extract=f"{MARKER} is what the user keeps, so the fact is {MARKER}"),
    "an error body echoing the prompt": lambda memory_llm, outside: outside.routes["memory_llm"].respond(
        400, json={"error": {"message": f"cannot read: {MARKER}", "type": "invalid_request_error"}}),
}


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
async def test_no_line_of_a_job_quotes_the_memory_llm(db: Any, worker: Any, memory_llm: Any, outside: Any,
                                                       stderr_text: Any, hostile: Any) -> None:
    hostile(memory_llm, outside)
    await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload("where is my key?"))
    worker = Worker(pool=worker.pool, embedder=worker.embedder, llm=worker.llm,  # one attempt: no retry in the run
                    settings=replace(worker.settings, retry_base_s=60), scanner=worker.scanner)
    assert await worker.run_until_idle() == 1
    text = stderr_text()
    lines = [json.loads(line) for line in text.splitlines()]
    # instructor's own error lines are silenced (two a failed call: an outage wrote hundreds); the job's is ours
    assert [line for line in lines if line.get("logger", "").startswith("instructor")] == []
    [decision] = [line for line in lines if line["event"] == "memory_decision"]
    assert MARKER not in text
    if "error" in decision:  # the job's error, kept with it, names the failure and not the body
        assert decision["error"] == "MemoryUnavailable"
        [(last_error,)] = await (await db.execute("SELECT last_error FROM memory_jobs")).fetchall()
        assert MARKER not in last_error and "(HTTP 400)" in last_error


def test_exception_text_and_tracebacks_keep_only_type_names(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json", memory_text=False)
    try:
        log.warning("job_write_failed", error=f"UniqueViolation: DETAIL: Key (content)=({MARKER}) exists")
        log.warning("outbox_spool_unreadable", error=f"cannot read {MARKER}", file="17.json")
        try:
            try:
                raise KeyError(MARKER)
            except KeyError as inner:
                raise ValueError(f"bad value {MARKER}") from inner
        except ValueError:
            log.exception("retrieval_error")
    finally:
        structlog.reset_defaults()
    text = capsys.readouterr().err
    typed, plain, traced = (json.loads(line) for line in text.splitlines())
    assert MARKER not in text
    assert typed["error"] == "UniqueViolation" and typed["event"] == "job_write_failed"
    assert plain["error"] == WITHHELD and plain["file"] == "17.json"  # our own fields stay
    assert "builtins.KeyError" in traced["exception"] and "builtins.ValueError" in traced["exception"]
    assert "test_log_text.py" in traced["exception"]  # the frames stay: where it failed is code, not text


def test_a_library_line_keeps_its_words_not_its_values(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json", memory_text=False)
    try:
        logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "memory-proxy", MARKER)
        logging.getLogger("openai._base_client").error(f"Last error: input_value='{MARKER}'")
        try:
            raise RuntimeError(MARKER)
        except RuntimeError:
            logging.getLogger("asyncio").exception("Task exception was never retrieved")
    finally:
        structlog.reset_defaults()
    text = capsys.readouterr().err
    templated, preformatted, traced = (json.loads(line) for line in text.splitlines())
    assert MARKER not in text
    assert templated["event"] == "error connecting in %r: %s" and templated["logger"] == "psycopg.pool"
    assert preformatted["event"] == WITHHELD and preformatted["level"] == "error"
    assert traced["event"] == WITHHELD and "builtins.RuntimeError" in traced["exception"]


def test_with_memory_text_on_lines_are_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    try:
        log.warning("job_write_failed", error=f"UniqueViolation: {MARKER}")
        logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "memory-proxy", MARKER)
    finally:
        structlog.reset_defaults()
    ours, library = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert ours["error"] == f"UniqueViolation: {MARKER}" and library["event"].endswith(MARKER)
