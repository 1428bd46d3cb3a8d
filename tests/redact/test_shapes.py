"""Secrets known by their layout alone, in any language (memory_proxy/redact/shapes.py): our own examples."""

from __future__ import annotations

import pytest

from memory_proxy.redact import Redaction, redact

FOUND = [  # (text, every value that must go, kind)
    ("Резервни кодове:\n4711 0815\n2288 9901\n6630 1184\n\nпази ги", ["4711", "0815", "2288", "9901", "6630"],
     "recovery_code"),
    ("GitHub recovery codes (keep safe):\n1a2b3-c4d5e\n9f8e7-d6c5b\n0a9b8-c7d6e", ["1a2b3-c4d5e", "0a9b8-c7d6e"],
     "recovery_code"),
    ("恢复码：\nK7Q2-9XPL\n3MZT-8RWA\nB5NC-2DFY", ["K7Q2-9XPL", "B5NC-2DFY"], "recovery_code"),
    ("clé Apple : 7HQ4-ZX9P-LM2C-8RTY-WQ3E-N5VB-K6DA", ["7HQ4-ZX9P-LM2C-8RTY-WQ3E-N5VB-K6DA"], "recovery_code"),
    ("Windows key VK7JG-NPHTM-C97JM-9MPGT-3V66T on the sticker", ["VK7JG-NPHTM-C97JM-9MPGT-3V66T"],
     "recovery_code"),
    ("login netflix: ana.paula@gmail.com / Pipoca2023", ["Pipoca2023"], "password"),
    ("anmeldung: k.schmidt@web.de und Sommer2024x", ["Sommer2024x"], "password"),
]


@pytest.mark.parametrize(("text", "values", "kind"), FOUND, ids=[f[0][:24] for f in FOUND])
def test_a_secret_goes_by_its_layout(text: str, values: list[str], kind: str) -> None:
    result = redact(text)
    assert kind in result.kinds and not [v for v in values if v in result.text], result.text


@pytest.mark.parametrize("text", [
    "Ergebnisse:\n2019 2020\n2021 2022\n2023 2024",  # years
    "ports:\n8080\n8443",  # two lines: not a list of codes
    "ISBN 978-3-16-148410-0 and id 123e4567-e89b-12d3-a456-426614174000",  # unequal groups
    "mail me at ana.paula@gmail.com, ticket follows",
    "contact: k.schmidt@web.de or 030 1234567",
    "Scores:\nteam a 12\nteam b 9\nteam c 7",
])
def test_look_alike_layouts_stay(text: str) -> None:
    assert redact(text) == Redaction(text, ())
