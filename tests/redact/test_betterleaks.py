"""The maintained credential rule set (memory_proxy/redact/betterleaks.py): the engine's own rules, picked per text by keyword."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pybetterleaks
import pytest
from pybetterleaks import ScanTimeoutError, scan_text

from memory_proxy.redact import betterleaks, kingfisher, redact, redact_strings
from tests.support.data import CHAT, SECRETS_CORPUS, USER_A
from tests.support.proxy import chat_body, metric, user_headers

CORPUS = SECRETS_CORPUS


def _dev(name: str, every: int) -> list[str]:
    """Every `every`-th line of the corpus's dev split (the test split is for benchmarks.secrets only)."""
    rows = [json.loads(line) for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line]
    return [r["text"] for r in rows if r["split"] == "dev"][::every]


def test_the_rules_are_the_ones_the_installed_engine_ships() -> None:
    """memory_proxy/redact/betterleaks.toml must be the engine's own default config, so that updating the package without
    the file (or the reverse) fails here, not silently in production."""
    native = Path(pybetterleaks.__file__).parent / "native"
    assert any(betterleaks.RULES_FILE.read_bytes() in lib.read_bytes() for lib in native.iterdir())


@pytest.mark.slow
def test_picking_rules_by_keyword_gives_the_verdict_of_the_whole_rule_set() -> None:
    lines = _dev("secrets.jsonl", 20) + _dev("lookalikes.jsonl", 4)
    assert len(lines) > 350
    differ = [t for t in lines if bool(scan_text(t).findings) != bool(betterleaks.leaked(t))]
    assert differ == []


def test_a_composite_rule_brings_the_rule_it_requires() -> None:
    """Without the rule it requires, a composite rule's hit is dropped and hides the generic rule's."""
    chosen = betterleaks._rules_for('clientSecret: "mdb_sa_sk_l5kuhxalkdia6gg_jpo5tto3dmtyouz4nviu7mtr"')
    assert {"mongodb-atlas-service-account-secret", "mongodb-atlas-service-account-id"} <= chosen


def test_a_text_without_any_keyword_costs_no_engine_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_call(*_: Any, **__: Any) -> Any:
        raise AssertionError("scanned")

    monkeypatch.setattr(betterleaks, "scan_text", no_call)
    assert betterleaks.leaked("We hiked up to the lake on Sunday and had lunch at noon.") == []


@pytest.mark.slow
def test_the_rule_sets_add_what_our_own_patterns_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a sample of the dev split: the maintained rule sets' findings (this one's and Kingfisher's) are what
    lift redaction above 97 %."""
    lines = _dev("secrets.jsonl", 10)
    both = sum(redact(t).redacted for t in lines)
    monkeypatch.setattr(kingfisher, "found", lambda _: iter(()))
    ours = sum(redact(t, found=[]).redacted for t in lines)
    assert both >= 0.97 * len(lines) and both - ours >= 0.2 * len(lines)


def test_a_connection_string_loses_only_its_password() -> None:
    text = "The Atlas URI is mongodb+srv://alice:hR1DZKFtO6iTV!62@cluster0.ab1cd.mongodb.net/test"
    assert betterleaks.leaked(text) == [("hR1DZKFtO6iTV!62", "connection_string")]
    assert "alice:[REDACTED: connection_string]@cluster0.ab1cd.mongodb.net/test" in redact(text).text


def test_a_payload_is_scanned_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def counting(text: str, **kwargs: Any) -> Any:
        calls.append(text)
        return scan_text(text, **kwargs)

    monkeypatch.setattr(betterleaks, "scan_text", counting)
    key = "glc_eyJvIjoiMTIzNDU2IiwibiI6InN0YWNrLTEyMzQ1Ni1obS1yZWFkLWFiYyIsImsiOiJhYmMxMjM0NTY3ODkwIn0="
    payload = {"user_message": f"my grafana token is {key}", "context": ["user: hi", f"assistant: {key}?"],
               "retrieved": [], "assistant_reply": "Noted."}
    redacted = json.dumps(redact_strings(payload))
    assert len(calls) == 1 and key[:24] not in redacted


async def test_a_turn_whose_text_cannot_be_scanned_keeps_no_job(
        client: Any, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: a job that could not be checked for secrets is dropped and counted, the chat goes on."""
    def timing_out(*_: Any, **__: Any) -> Any:
        raise ScanTimeoutError(())

    monkeypatch.setattr(betterleaks, "scan_text", timing_out)
    before = metric("memory_proxy_jobs_total", event="unscanned")
    reply = await client.post(CHAT, json=chat_body("My api key for the weather service is on the fridge."),
                              headers=user_headers(USER_A))
    assert reply.status_code == 200
    assert metric("memory_proxy_jobs_total", event="unscanned") == before + 1
    assert await (await db.execute("SELECT count(*) FROM memory_jobs")).fetchone() == (0,)
    # a turn with no keyword of any rule needs no scan, so its job is kept
    await client.post(CHAT, json=chat_body("We moved to Lisbon in May."), headers=user_headers(USER_A))
    assert await (await db.execute("SELECT count(*) FROM memory_jobs")).fetchone() == (1,)


async def test_a_memory_the_scanner_cannot_check_is_refused_with_503_not_stored(
        client: Any, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The management API fails closed too, with a clear OpenAI-format error instead of a 500."""
    def timing_out(*_: Any, **__: Any) -> Any:
        raise ScanTimeoutError(())

    monkeypatch.setattr(betterleaks, "scan_text", timing_out)
    reply = await client.post("/api/v1/memories", params={"user": USER_A},
                              json={"content": "User keeps the api key for the weather service on the fridge."})
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "secret_scan_failed"
    assert await (await db.execute("SELECT count(*) FROM vectors")).fetchone() == (0,)



def test_a_secret_the_engine_reports_at_each_of_its_places_is_looked_for_once() -> None:
    """n reports of one secret pasted n times give n spans, not n² (a 256 KB paste: 4 million spans)."""
    text = "token ghp_0123456789abcdefghijABCDEFGHIJ0123456 " * 500
    found = [("ghp_0123456789abcdefghijABCDEFGHIJ0123456", "github_token")] * 500
    assert len(list(betterleaks.occurrences(text, found))) == 500


def test_a_long_text_is_scanned_in_bounded_windows_and_a_key_across_an_edge_is_found_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's cost per match grows with the text it is given: one call on 256 KB of key ids took
    seconds. Each call gets at most SCAN_WINDOW characters, and windows overlap by SCAN_OVERLAP."""
    sizes: list[int] = []

    def measuring(text: str, **kwargs: Any) -> Any:
        sizes.append(len(text))
        return scan_text(text, **kwargs)

    monkeypatch.setattr(betterleaks, "scan_text", measuring)
    pair = "aws_access_key_id = AKIAZ7QW3RTY5UIOP2LK\naws_secret_access_key = 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\n"
    filler = "we walked along the river and talked about nothing much\n"
    head = filler * (betterleaks.SCAN_WINDOW // len(filler))
    text = head[:len(head) - 40] + pair + filler * 3000  # the pair straddles the first window's edge
    found = betterleaks.leaked(text)
    assert max(sizes) <= betterleaks.SCAN_WINDOW < len(text)  # windows without a keyword make no call at all
    assert ("AKIAZ7QW3RTY5UIOP2LK", "aws_key") in found
    assert all(secret in text and len(secret) >= 20 for secret, _ in found)  # no piece of a cut token
