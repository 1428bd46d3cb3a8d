"""The second maintained credential catalog (memory_proxy/redact/kingfisher.py): what it adds, where it puts the placeholder,
and that a scan it cannot finish is never taken for a clean text."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from memory_proxy.redact import Redaction, kingfisher, redact, warm
from memory_proxy.redact.betterleaks import ScanFailed
from tests.support.data import SECRETS_CORPUS

CORPUS = SECRETS_CORPUS
POSTHOG = "phx_sXNyZ4gbsX4wwzOM8q_E1076ZJhN-i1BpN088af7a"  # a published sample of the dev split


def _dev(name: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line]
    return [r for r in rows if r["split"] == "dev"]


def test_a_credential_only_this_catalog_knows_is_redacted() -> None:
    result = redact(f"posthog: {POSTHOG} – keep it")
    assert result == Redaction("posthog: [REDACTED: api_key] – keep it", ("api_key",))


def test_offsets_are_characters_after_non_ascii_text() -> None:
    text = f"für PostHög → {POSTHOG} ok"
    assert redact(text).text == "für PostHög → [REDACTED: api_key] ok"


def test_a_credential_inside_base64_takes_the_whole_encoded_run() -> None:
    blob = base64.b64encode(f"token={POSTHOG}\n".encode()).decode()
    result = redact(f"config: {blob} end")
    assert result.text == "config: [REDACTED: api_key] end"


def test_every_copy_of_a_found_secret_goes() -> None:
    text = f"{POSTHOG} and again: {POSTHOG}"
    assert POSTHOG not in redact(text).text


@pytest.mark.slow
def test_it_adds_to_the_rest_on_the_dev_split_and_flags_no_look_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the published dev samples: lines only this catalog catches, and no look-alike it flags alone."""
    secrets = [r["text"] for r in _dev("secrets.jsonl") if any(kingfisher.found(r["text"]))]
    lookalikes = [r["text"] for r in _dev("lookalikes.jsonl") + _dev("django_lookalikes.jsonl")
                  if any(kingfisher.found(r["text"]))]
    monkeypatch.setattr(kingfisher, "found", lambda _: iter(()))
    assert len([t for t in secrets if not redact(t).redacted]) >= 10
    assert [t for t in lookalikes if not redact(t).redacted] == []


@pytest.mark.parametrize("error", [TimeoutError("deadline"), RuntimeError("cancelled")])
def test_a_scan_that_fails_raises_scan_failed(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    class Failing:
        def scan(self, *_: Any, **__: Any) -> Any:
            raise error

    monkeypatch.setattr(kingfisher, "_scanner", lambda: Failing())
    with pytest.raises(ScanFailed):
        redact("nothing to see here")


def test_warming_compiles_the_catalog_before_the_first_scan() -> None:
    kingfisher._scanner.cache_clear()
    warm()
    assert kingfisher._scanner.cache_info().currsize == 1
