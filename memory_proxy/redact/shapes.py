"""Secrets known by their layout alone, in any language, with no word that names them:
- a list of codes under a heading: a line ending with a colon, then three lines or more that hold nothing but one
  or two codes each ("Google backup codes:\\n1147 8830\\n6692 0315\\n4428 7759", GitHub's "a1b2c-3d4e5" lines);
  recovery and backup codes come so, and no other list of a chat does (years do not count as codes);
- a password right after an e-mail address, the two joined by a comma, a slash, a colon or one short word
  ("inlog bol.com: sanne.v@ziggo.nl en Boeken4life", "erik.l@telia.com, Auktion2020se"): a login and its
  password, in any language; the password has letters and digits, 6+ characters, and is no address;
- a key in five or more equal groups of 4-6 capitals and digits ("84Q5-HTBY-XQCS-LABQ-XEX9-JZHT-EYGJ", an
  Apple recovery key; a product key): UUIDs, ISBNs and dates have unequal groups, MAC and IPv6 addresses colons.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .rule import Span

_CODE = r"(?=[A-Za-z0-9-]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,6}){0,3}"
_LINE = rf"[ \t]*{_CODE}(?:[ \t]+{_CODE})?[ \t]*"
_CODE_LIST = re.compile(rf"[:：][ \t]*\n(?P<codes>{_LINE}(?:\n{_LINE}){{2,}})(?=\n|$)")
_ONE_CODE = re.compile(rf"(?<![\w-]){_CODE}(?![\w-])")
_YEAR = re.compile(r"(?:19|20)\d\d")
_LOGIN = re.compile(  # an address, a joint, then a token with letters and digits
    r"[\w.+-]@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}(?:\s*[,/:|]\s*|\s+\w{1,4}\s+)"
    r"(?P<v>(?=[^\s@/]*[A-Za-z])(?=[^\s@/]*\d)[^\s\"'`,;@/]{6,64})(?![^\s,;.!?])")
_GROUPED_KEY = re.compile(r"(?<![\w-])(?P<group>[A-Z0-9]{4,6})(?:-[A-Z0-9]{4,6}){4,}(?![\w-])")


def code_lists(text: str) -> Iterator[Span]:
    if ":" not in text and "：" not in text:
        return
    for found in _CODE_LIST.finditer(text):
        block = found["codes"]
        if all(_YEAR.fullmatch(code) for code in _ONE_CODE.findall(block)):
            continue  # a table of years
        for code in _ONE_CODE.finditer(block):
            yield found.start("codes") + code.start(), found.start("codes") + code.end(), "recovery_code"


def logins(text: str) -> Iterator[Span]:
    if "@" in text:
        for found in _LOGIN.finditer(text):
            if "://" not in found["v"] and not found["v"].startswith("[REDACTED"):
                yield *found.span("v"), "password"


def grouped_keys(text: str) -> Iterator[Span]:
    if "-" not in text:
        return
    for found in _GROUPED_KEY.finditer(text):
        value, size = found[0], len(found["group"])
        if all(len(group) == size for group in value.split("-")) and not value.replace("-", "").isdigit() \
                and any(c.isdigit() for c in value):
            yield found.start(), found.end(), "recovery_code"
