"""Secrets stated in a sentence: a word names it, the value follows in the same sentence.

No grammar per language: the value is looked for in the sentence after the word (80 characters), by its shape.
- password: the word in 70+ more languages (Django's translations: password_words.json says where from), those
  proxy/redact/passwords.py does not read; the first of the next five tokens that looks like a password
  ("lösenordet är Sommar2024!", "пароль: Qwerty-42", "密码是Abc12345"): 6+ characters with a digit, a symbol or
  an inner capital, and not a number, date, version, URL or e-mail address. "Heslo musí mít alespoň 8 znaků"
  stays.
- personal secrets, named in English and a few other languages: a national ID, tax or passport number (6+
  digits, or letters and 3+ digits); a card's CVV (3-4 digits); a one-time or 2FA code; recovery and backup
  codes (all of them, to the end of the sentence); a door, gate, alarm or safe code; the answer to a security
  question (the rest of the clause). Bare numbers without such a word stay (orders, phones).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

import stdnum

from .passwords import PASSWORD, STRONG
from .rule import Span

_WORDS = [w for w in json.loads(Path(__file__).with_name("password_words.json").read_text(encoding="utf-8"))["words"]
          if not re.fullmatch(PASSWORD, w)]
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[\n。！？]")
_TOKEN = re.compile(r"[^\s\"'`«»“”„‚‘’,;，、]+")
_CJK_LEAD = re.compile(r"^[:=：\-—–(\[]*[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]*[:=：\-—–]*")
_LOOKS_STRONG = re.compile(STRONG)  # the shape a bare value needs after a weak password word
_NOT_A_PASSWORD = re.compile(r"[\d.,:/+\-]+|\w+://\S*|www\.\S*|[^@\s]+@[^@\s]+\.[a-z]{2,}|\[REDACTED: \w+\]",
                             re.IGNORECASE)


def _password_value(window: str) -> Iterator[tuple[int, int]]:
    for token in list(_TOKEN.finditer(window))[:5]:
        lead = _CJK_LEAD.match(token[0])
        value = token[0][lead.end() if lead else 0:].rstrip(".,;:!?)]")
        if _LOOKS_STRONG.match(value) and not _NOT_A_PASSWORD.fullmatch(value):
            start = token.start() + token[0].find(value)
            yield start, start + len(value)
            return


def _shaped(pattern: str, every: bool = False, check: Callable[[str], bool] | None = None,
            ) -> Callable[[str], Iterator[tuple[int, int]]]:
    """The first value of this shape in the sentence (or every one), group `v` if the pattern has it."""
    regex = re.compile(pattern)

    def values(window: str) -> Iterator[tuple[int, int]]:
        for m in regex.finditer(window):
            group = "v" if "v" in regex.groupindex else 0
            if check is None or check(m[group]):
                yield m.span(group)
                if not every:
                    return

    return values


class _Stated(NamedTuple):
    kind: str
    words: re.Pattern[str]
    triggers: tuple[str, ...]  # lower-case; one must occur for `words` to run
    value: Callable[[str], Iterator[tuple[int, int]]]
    reach: int = 80
    end: re.Pattern[str] = _SENTENCE_END


def _named(kind: str, words: tuple[str, ...], value: Callable[[str], Iterator[tuple[int, int]]],
           reach: int = 80, end: re.Pattern[str] = _SENTENCE_END) -> _Stated:
    pattern = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return _Stated(kind, re.compile(rf"(?<!\w)(?:{pattern})(?!\w)", re.IGNORECASE), words, value, reach, end)


def _identity_words() -> tuple[str, ...]:
    """The names of personal identity and tax numbers in python-stdnum's modules, short and native ("PESEL",
    "Rodné číslo", "Αριθμός Μητρώου Κοινωνικής Ασφάλισης", "РНОКПП", "個人番号"): each module's first line."""
    names: set[str] = set()
    for module in pkgutil.walk_packages(stdnum.__path__, "stdnum."):
        if module.ispkg:
            continue
        with suppress(ImportError):
            doc = " ".join((importlib.import_module(module.name).__doc__ or "").split("\n\n")[0].split())
            m = _STDNUM_TITLE.match(doc)
            if m and _PERSONAL.search(m[2]) and not _NOT_PERSONAL.search(m[2]):
                names.update(n.strip() for n in (*m[1].split(","), *m[2].split(",")[:-1]))
    return tuple(sorted({n.lower() for n in names if len(n) >= 3 and not _NOT_AN_ID.search(n)}))


_STDNUM_TITLE = re.compile(r"([^(]+)\(([^)]*)\)")
_PERSONAL = re.compile(r"personal|identity|identification number|social security|citizen|resident|birth number"
                       r"|national identifier|individual|insurance|taxpayer|tax code for individuals", re.I)
_NOT_PERSONAL = re.compile(r"vat|compan|business|organi|legal entit", re.I)
_NOT_AN_ID = re.compile(r"imei|imsi|cusip|isin|vatin|accise|lithuanian|number$|^pin$", re.I)

_CODE = r"(?<![\w-])(?=[A-Za-z0-9-]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,6}){0,3}(?![\w-])"
_STATED = [
    _Stated("password", re.compile("|".join(re.escape(w) for w in sorted(_WORDS, key=len, reverse=True)),
                                   re.IGNORECASE), tuple(_WORDS), _password_value),
    _named("national_id", (
        "social security number", "social security no", "ssn", "national id", "national identity number",
        "id number", "id card number", "identity card number", "passport number", "passport no", "tax id",
        "tax number", "taxpayer id", "national insurance number", "ni number", "nino", "driver's license number",
        "driving licence number", "bsn", "burgerservicenummer", "pesel", "cpf", "aadhaar", "personnummer",
        "henkilötunnus", "cpr", "dni", "nif", "codice fiscale", "steuer-id", "steueridentifikationsnummer",
        "sozialversicherungsnummer", "personalausweisnummer", "ausweisnummer", "numéro de sécurité sociale",
        "numéro fiscal", "nir", "curp", "rfc", "rut", "cuil", "cuit", "número de identidad", "carta d'identità",
        "tc kimlik", "snils", "инн", "снилс", "номер паспорта", *_identity_words()),
        _shaped(r"(?<![\w-])(?:[A-Z]{0,4}\d[\d \-./]{3,20}\d[A-Z]{0,2}|(?=[A-Z]*\d)[A-Z0-9]{8,20})(?![\w-])",
                check=lambda v: sum(c.isdigit() for c in v) >= (6 if v[:1].isdigit() else 3))),
    _named("card_cvv", ("cvv", "cvv2", "cvc", "cvc2", "card verification code", "card security code",
                        "security code on the back", "kartenprüfnummer", "cryptogramme"),
           _shaped(r"(?<![\d/.-])\d{3,4}(?![\d/.-])")),
    _named("one_time_code", ("otp", "one-time code", "one time code", "one-time password", "verification code",
                             "2fa code", "two-factor code", "mfa code", "login code", "sign-in code", "sms code",
                             "authentication code", "auth code", "security code", "bestätigungscode",
                             "code de vérification", "código de verificación", "codice di verifica"),
           _shaped(_CODE)),
    _named("recovery_code", ("recovery code", "recovery codes", "backup code", "backup codes", "recovery key",
                             "backup key", "wiederherstellungscode", "codes de récupération",
                             "códigos de recuperación", "codici di recupero"), _shaped(_CODE, every=True), 400,
           re.compile(r"[.!?](?=\s|$)|\n\s*\n")),  # a list of codes, one a line, to a blank line
    _named("door_code", ("door code", "gate code", "alarm code", "entry code", "keypad code", "garage code",
                         "lock code", "lockbox code", "key safe", "safe code", "safe combination", "lock combination",
                         "building code", "digicode", "code de la porte", "türcode", "haustürcode", "tor-code",
                         "código de la puerta", "codice del portone"),
           _shaped(r"(?<![\w.])[#*]?(?:\d{3,8}|\d{1,2}(?:[- ]\d{1,2}){2,3})[#*]?(?![\w.])")),
    _named("security_answer", ("mother's maiden name", "mothers maiden name", "maiden name", "first pet",
                               "first pet's name", "security question", "security answer", "first car",
                               "childhood best friend", "city where i was born"),
           _shaped(r"^[^.!?\n]{0,40}?(?:\bis|\bwas|:|=)\s+(?P<v>[^\s.,;!?\n][^.,;!?\n]{1,39})")),
]


def stated(text: str, low: str) -> Iterator[Span]:
    for rule in _STATED:
        if not any(w in low for w in rule.triggers):
            continue
        for word in rule.words.finditer(text):
            after = text[word.end():word.end() + rule.reach]
            stop = rule.end.search(after)
            for start, end in rule.value(after[:stop.start()] if stop else after):
                yield word.end() + start, word.end() + end, rule.kind

