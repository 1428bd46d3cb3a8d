"""Secrets stated in any language by the words of maintained translations (memory_proxy/redact/nearby.py, lexicon.py),
and the checksummed values beside them (checksummed.py): our own examples, not the frozen corpus's."""

from __future__ import annotations

import time

import pytest

from memory_proxy.redact import Redaction, redact
from memory_proxy.redact.lexicon import Lexicon, fold

STATED = [  # (text, secret): the value after the word, or before it, in the same sentence
    ("Sonnenblume7! ist das Passwort vom Laptop", "Sonnenblume7!"),
    ("la contraseña del router, por si acaso, es Gato_Negro88", "Gato_Negro88"),
    ("kod do bramy 4719, wejście od podwórka", "4719"),
    ("ключ от сейфа не нужен, код 58213", "58213"),
    ("2684 is de code van het hek", "2684"),
    ("porta do prédio abre com 7391#", "7391#"),
    ("kode pintu belakang 6-1-9-3 ya", "6-1-9-3"),
    ("mật khẩu email là Hoa@Sen2020 nhé", "Hoa@Sen2020"),
    ("şifremi değiştirdim: Deniz*1453", "Deniz*1453"),
    ("カードのパスワードは 4721", "4721"),
    ("Wiederherstellungs-Codes:\n4711 0815\n2288 9900\n\nDanke", "2288 9900"),
]
HARMLESS = ["el código postal es 28013", "zip code 94110, San Francisco", "error code 503 again",
            "das Passwort muss 12 Zeichen haben", "la porte 12 est fermée", "my phone is +33 6 12 34 56 78",
            "Raum 2.114 um 10:30", "order 4471 shipped", "die Tür klemmt seit 2019 nicht mehr"]


@pytest.mark.parametrize(("text", "secret"), STATED, ids=[s[0][:24] for s in STATED])
def test_a_secret_named_in_another_language_goes_and_the_sentence_stays(text: str, secret: str) -> None:
    result = redact(text)
    assert secret not in result.text and result.redacted
    assert len(result.text) > len(text) - len(secret)  # only the value went


@pytest.mark.parametrize("text", [*HARMLESS, "PgBouncer listens on port 6432 behind the API gateway."])
def test_harmless_numbers_beside_those_words_stay(text: str) -> None:
    assert redact(text) == Redaction(text, ())


@pytest.mark.parametrize(("text", "kind"), [
    ("card 4111 1111 1111 1111 09/29 cvv 123 thanks", "card_cvv"),
    ("karta 5555 5555 5555 4444/317", "card_cvv"),
    ("BitLocker 110011-220022-330033-440044-550055-660066-770077-880088", "recovery_code"),
    ("TC 10000000146 kargo için", "national_id"),  # a valid Turkish identity number, no word for it
    ("abandon ability able about above absent absorb abstract absurd abuse access accident", "seed_phrase"),
])
def test_checksummed_and_shaped_values_go_without_a_word(text: str, kind: str) -> None:
    assert kind in redact(text).kinds


def test_a_word_matches_inflected_and_a_longer_word_does_not() -> None:
    lexicon = Lexicon({"code": ["kod", "κωδικός"], "door": ["车库门"]})
    assert [h.groups for h in lexicon.hits("podaj kodem lub κωδικό, 车库门")] == [("code",), ("code",), ("door",)]
    assert list(lexicon.hits("kodowanieprogramu")) == []


def test_an_english_technical_word_is_no_stem_of_a_longer_word() -> None:
    """"port" is the stem of "portal" (a gate), and a network port in English: "staging moved to port 5433" is
    a team's fact, not a door code (issue 37); the door words of the languages it names a gate in still work."""
    lexicon = Lexicon({"door": ["portal", "slotje"]}, never=["port", "slot"])
    assert list(lexicon.hits("port 5433, slot 2048")) == []
    assert [h.groups for h in lexicon.hits("portal portalen")] == [("door",), ("door",)]
    assert redact("Staging moved to port 5433, slot 2048.") == Redaction("Staging moved to port 5433, slot 2048.", ())
    assert "4711" not in redact("portkoden är 4711").text


def test_a_word_in_two_groups_is_in_both_and_an_acronym_matches_only_alone() -> None:
    lexicon = Lexicon({"password": ["κωδικός"], "code": ["κωδικός"], "identity": ["cpf"]}, whole=["identity"])
    assert [h.groups for h in lexicon.hits("κωδικός")] == [("password", "code")]
    assert [h.groups for h in lexicon.hits("meu cpf, cpfs")] == [("identity",)]


@pytest.mark.parametrize(("text", "word"), [
    ("rentenversicherungsnummer", "versicherungsnummer"),  # the last part of a compound
    ("wifilösenordet", "lösenord"),  # with an inflection
    ("والباسورد", "باسورد"),  # after Arabic proclitics ("and" + the article)
    (fold("ξεκλειδώνει"), "ξεκλείδωμα"),  # without its accents
])
def test_a_word_matches_in_a_compound_after_proclitics_and_without_accents(text: str, word: str) -> None:
    assert [h.groups for h in Lexicon({"g": [word]}).hits(text)] == [("g",)]


def test_a_product_named_after_a_word_is_no_compound() -> None:
    assert list(Lexicon({"password": ["password"]}).hits("1password")) == []


@pytest.mark.parametrize("text", ["kod " * 60000, "密码 " * 80000, "1234 " * 50000, "pw 4711-" * 30000,
                                  "passwort Ab1! " * 18000, "4111 1111 1111 1111 " * 12000])
def test_256_kb_of_trigger_words_and_digits_stays_linear(text: str) -> None:
    started = time.process_time()  # this process's CPU: other processes' load does not count
    redact(text[:262144], found=[])
    assert time.process_time() - started < 30  # generous: a super-linear rule takes hours here
