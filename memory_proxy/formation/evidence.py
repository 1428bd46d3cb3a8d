"""Where a fact may come from: the guards of formation that hold whatever model runs. Pure functions.

What a message *means* (is it a lasting fact, a joke, a request, a change, a forget request) is the memory
LLM's to judge (formation/extract.py, formation/resolve.py). These rules only guard what no model may be
trusted with:

- `own_words(message)` — provenance. Only the user's own words are a source of facts: OpenWebUI's RAG
  template (`_rag`: the documents and the template's instructions are not the user's), fenced code and
  triple-quoted blocks, block quotes, text between separator lines (`---`: pasted e-mails and documents), the lines
  of a pasted chat log (two or more that start with a time and a speaker)
  and long quoted passages (40 characters, a Han or kana one counting two) are left out; prompt tags and chat-template
  tokens are removed (the sentence kept); sentences that address a machine ("SYSTEM:", "ignore previous
  instructions", "note to the AI", statements about "the user" in the third person) are left out. A
  sentence that held a secret stays the user's, with its placeholder ("db01 moved, its password is
  [REDACTED: password]": the secret was redacted before the job was written): what else it says is theirs
  (db01), and a fact holding the placeholder is dropped whole (formation/memory_text.py). What is
  left out is kept apart (`OwnWords.left_out`): it is the text a fact must not come from. The
  machine-addressed patterns are English: an injection written in another language reaches the model as
  the user's words (it is told that the message is data), and the benchmark reports each language apart:
  formation/provenance.py asks the memory LLM which of the remaining sentences are not the user's.
  A sentence said twice is kept once (OpenWebUI may send the question both in the template and after it).
- `grounding(fact, …)` — the names and numbers of a fact come from the user's words or from the turn's
  date ("born yesterday" → 2026-11-24). Compared accent-, case- and
  script-insensitively (anyascii: "Москве" and "Moskva", "Kraków" and "krakowie" by a shared stem).
  A name or number found only in text that is not the user's (the assistant's reply, what own_words left
  out, the prompt's examples) is refused; a name found nowhere is a translation ("French" for
  "français") and passes; numbers up to 20 and years are not checked (written in words in any language,
  resolved from a date, and found in any text), other numbers must be the user's, in digits or in words
  (text2num reads "thirty-two", "trente-deux", "zweiunddreißig" in its eight languages, cn2an "三十二"). The parts of an
  address ("recovery@evil.example", "evil.example", "Node.js") count as names, in any case.
"""

from __future__ import annotations

import calendar
import re
import unicodedata
import warnings
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

import cn2an
from anyascii import anyascii
from rapidfuzz import fuzz, process
from text_to_num import alpha2digit

from .drops import Drop

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_NUMBER = re.compile(r"(\d+(?:[.,]\d+)?)\s?([kK]\b)?")
_THOUSANDS = re.compile(r"(?<=\d)[.,\s'’\u00a0\u202f](?=\d{3}(?!\d))")  # "150 000", "1.200", "12,500"
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# an address: e-mail, web or domain ("recovery@evil.example", "evil.example", "Node.js")
_ADDRESS = re.compile(r"[\w+-]+(?:[.@][\w+-]+)*[.@][^\W\d_]{2,}\b")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])\s*|\n+")  # CJK needs no space after

_RAG_QUERY = re.compile(r"<user_query>\s*(.*?)\s*</user_query>", re.S | re.I)
_CONTEXT_OPEN = re.compile(r"<context>", re.I)
_CONTEXT_CLOSE = re.compile(r"</context>", re.I)
_RAG_TASK = re.compile(r"^###\s*Task:", re.M)  # the first line of OpenWebUI's RAG template (and of its tasks)
_FENCED = re.compile(r"(```|\"\"\"|''').*?(?:\1|\Z)", re.S)  # code fences, and triple-quoted blocks
_BLOCK_QUOTE = re.compile(r"^[ \t]*>.*$", re.M)
_SEPARATED = re.compile(r"^[ \t]*([-=*_~])\1{2,}[ \t]*$.*?(?:^[ \t]*\1{3,}[ \t]*$|\Z)", re.S | re.M)
_QUOTE = re.compile(r'["“”«»„「『]([^"“”«»„「」『』\n]{16,})["“”«»„」』]')  # someone else's words, if long
LONG_QUOTE = 40  # characters of a script with spaces; a Han or kana character counts as two (it says more)
_TAGS = re.compile(r"<\|[^|>\n]{1,30}\|>|</?[a-z_][a-z0-9_-]{0,30}\s*/?>", re.I)  # <user_message>, <|im_end|>
_MACHINE_ADDRESSED = re.compile(r"""(?ix)
    ^\W*(system|assistant|ai|memory|instructions?)\s*:          # role labels
  | \b(ignore|disregard|override)\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|system)\s
  | \b(note|message|instructions?|reminder)\s+(to|for)\s+(the\s+|all\s+|any\s+)?(ai|assistants?|models?|llms?|memory|system|bots?)\b
  | \b(ai|llm)\s+(assistants?|models?|systems?)\b
  | \b(new|updated)\s+(memory|memories|instructions?|system\s+prompt)\b
  | \bthe\s+user(['’]s|\s+(is|has|wants|prefers|likes|lives|works|asked|would|authori[sz]ed|must|should))\b
  | \buser\s+(said|says|told|wrote|mentioned|stated)\b       # words put in the user's mouth, in the third person
""")
# A chat log pasted in: lines that start with a time and a speaker ("[09:16] Luis: …", "29.05.24, 09:12 - Ana: …"),
# two or more of them: the speakers' words, not the user's.
_LOGGED = re.compile(r"^[ \t]*[\[(]?(?:\d{1,4}[./-]\d{1,2}(?:[./-]\d{1,4})?,?\s*)?\d{1,2}[:.]\d{2}(?::\d{2})?\s*"
                     r"(?:[ap]\.?m\.?)?[\])]?\s*(?:-\s*)?[^:\n]{1,40}:[ \t]+\S.*$", re.M | re.I)
OMITTED = " […] "  # where a part left out stood
_SELF = frozenset({"user", "user's", "i"})  # a fact's subject, not a name
# English calendar words a fact may use for a date resolved from the turn's day ("User starts on Monday").
_CALENDAR = frozenset(w.lower() for w in [*calendar.month_name[1:], *calendar.day_name])
DATE_WINDOW_DAYS = 400  # a resolved date ("next March", "last spring") lies within this of the turn
SMALL_NUMBER = 20  # numbers up to this are often written in words ("two kids", "dos hijos"): not checked
YEARS = (1900, 2100)  # a year is often resolved from the turn's date ("three years ago"): not checked
NUMBER_WORDS = ("en", "fr", "de", "es", "it", "pt", "nl", "da")  # text2num's languages: each reading is tried
_HAN_NUMERAL = re.compile("[〇零一二两三四五六七八九十百千万萬億亿]")  # Chinese and Japanese numerals: cn2an reads them
NEAR = 0.75  # spelling similarity at which two names are one (transliterations, exonyms)


@dataclass(frozen=True, slots=True)
class OwnWords:
    """The user's own sentences of one message, and what was left out of it as not theirs."""

    sentences: tuple[str, ...]
    left_out: str = ""

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _folded(word: str) -> str:
    """Lowercase ASCII: accents off, any script transliterated ("Москва" → "moskva", "Kraków" → "krakow")."""
    return anyascii(unicodedata.normalize("NFC", word)).lower().replace("'", "")


def words(text: str) -> list[str]:
    return [_folded(w) for w in _WORD.findall(text)]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _rag(message: str) -> tuple[str, list[str]]:
    """The part of `message` that can be the user's, and the part of OpenWebUI's RAG template that is not.

    OpenWebUI 0.12.4 (utils/task.rag_template, utils/middleware.apply_source_context_to_messages) fills
    its template, "### Task: …instructions… <context>\n{{CONTEXT}}\n</context>" (the default; a custom one
    may add `<user_query>{{QUERY}}</user_query>` or any text where {{QUERY}} stands, after the context),
    and puts it before the user's message ("{template}\n{message}"; with RAG_SYSTEM_CONTEXT it goes into
    the system message instead and the user's message stays as typed). The documents in {{CONTEXT}} may hold
    any text, tags included ("</context><user_query>…"), but they all stand before the template's own
    closing tag: the last `</context>`. So the first `<context>` opens the documents, the last
    `</context>` closes them; what follows is the query and the user's message; what precedes, from
    "### Task:" on, is the template's instructions; text before those (an older placement: the message,
    then the template) is the user's. A `<context>` never closed (a message cut short) runs to the end.
    A message without a context block is not the template's: only its first `<user_query>`, if any, is kept
    (the rule before the template was read this way, so such a message keeps what it kept)."""
    opened = _CONTEXT_OPEN.search(message)
    if not opened:
        query = _RAG_QUERY.search(message)
        return (query.group(1), [message.replace(query.group(0), " ")]) if query else (message, [])
    closes = list(_CONTEXT_CLOSE.finditer(message, opened.end()))
    end = closes[-1] if closes else None
    head, context = message[:opened.start()], message[opened.end():end.start() if end else len(message)]
    tail = message[end.end():] if end else ""
    task = _RAG_TASK.search(head)
    before, instructions = (head[:task.start()], head[task.start():]) if task else (head, "")
    return f"{before}\n{tail}", [instructions, context]


def users_part(message: str) -> str:
    """`message` less OpenWebUI's RAG template around it (its instructions and documents, see `_rag`): what
    the chat turn is searched by and what a formation job keeps."""
    return _rag(message)[0]


def own_words(message: str) -> OwnWords:
    """The sentences of `message` that are the user's own (see the module docstring)."""
    text, left_out = _rag(message)
    for pasted in (_FENCED, _SEPARATED, _BLOCK_QUOTE):
        left_out += [m.group(0) for m in pasted.finditer(text)]
        text = pasted.sub(OMITTED, text)
    logged = _LOGGED.findall(text) if "\n" in text else []
    if len(logged) >= 2:
        left_out += [m.group(0) for m in _LOGGED.finditer(text)]
        text = _LOGGED.sub(OMITTED, text)
    quotes = [m for m in _QUOTE.finditer(text) if _width(m.group(1)) >= LONG_QUOTE]
    left_out += [m.group(0) for m in quotes]
    for m in reversed(quotes):
        text = text[:m.start()] + OMITTED + text[m.end():]
    text = _TAGS.sub(" ", text)
    kept: dict[str, None] = {}  # in order, each once
    for sentence in _sentences(text):
        if _MACHINE_ADDRESSED.search(sentence):
            left_out.append(sentence)
        else:
            kept[sentence] = None
    return OwnWords(tuple(kept), "\n".join(t for t in left_out if t.strip()))


@dataclass(frozen=True, slots=True)
class Source:
    """Folded words of some text, for looking a name up in it."""

    text: str
    words: frozenset[str]
    joined: str  # every word run together: names of scripts written without spaces ("東京に住んでいます")
    stems: frozenset[str]  # each word's first four and first five letters: a set lookup, not a scan

    @classmethod
    def of(cls, *texts: str) -> Source:
        return _source(texts)

    @property
    def numbers(self) -> frozenset[float]:
        """The numbers here, in digits or in words: read only when a fact holds a number to check (a name
        lookup, as the `remember` tool makes on the event loop, never pays for it)."""
        return _numbers_in(self.text)

    def has(self, name: str, *, spaced: bool = True, near: bool = True) -> bool:
        """`name` (folded) is a word here, or shares its first five letters with one ("krakow" ~
        "krakowie", "moskva" ~ "moskve"), or is spelt nearly alike ("maria" ~ "mariya", "londres" ~
        "london": the ratio 2·common/total ≥ NEAR, rapidfuzz's, in C++, linear in the words); a name of a
        script without spaces may sit inside a word."""
        if name in self.words:
            return True
        if not spaced:
            return name in self.joined
        stem = name[:5]
        return len(stem) >= 4 and (stem in self.stems
                                   or (near and process.extractOne(name, self.words, scorer=fuzz.ratio,
                                                                   score_cutoff=NEAR * 100) is not None))


@lru_cache(maxsize=16)
def _source(texts: tuple[str, ...]) -> Source:
    """The Source of `texts`, built once for all the facts of a turn (grounding asks for it per fact)."""
    text = "\n".join(texts)
    found = words(text)
    return Source(text, frozenset(found), "".join(found), frozenset(w[:n] for w in found for n in (4, 5)))


@lru_cache(maxsize=16)
def _numbers_in(text: str) -> frozenset[float]:
    """The numbers `text` holds in digits, and those it writes in words ("thirty-two", "trente-deux", "三十二")
    as maintained readers read them: text2num in its eight languages, cn2an for Han numerals."""
    readings = [text, *(alpha2digit(text, language) for language in NUMBER_WORDS)]
    if _HAN_NUMERAL.search(text):
        with warnings.catch_warnings():  # cn2an warns of each numeral it cannot read, and leaves it as it was
            warnings.simplefilter("ignore")
            readings.append(cn2an.transform(text, "cn2an"))
    return frozenset(number for reading in readings for number in _values(reading))


def _uncased(word: str) -> bool:
    """A word of a script without letter case (Han, kana, Thai…): a name there, written without spaces."""
    return any(c.isalpha() and c.upper() == c.lower() for c in word)


def names(fact: str) -> list[str]:
    """The names a fact holds: capitalised words past the first, words of scripts without case, and the
    parts of an address (three letters or more)."""
    text = _ISO_DATE.sub(" ", fact)
    found = _WORD.findall(_ADDRESS.sub(" ", text))
    parts = [w for address in _ADDRESS.findall(text) for w in _WORD.findall(address) if len(w) >= 3]
    return [*(w for i, w in enumerate(found)
              if not w.isdigit() and (_uncased(w) or (i > 0 and w[:1].isupper()))
              and _folded(w).removesuffix("s") not in _SELF and _folded(w) not in _CALENDAR),
            *(w for w in parts if not w.isdigit())]


def _values(text: str) -> list[float]:
    """The numbers of a text, thousands separators and "k" read: "1.200 €", "1,200", "1.2k" are 1200."""
    return [float(n.replace(",", ".")) * (1000 if k else 1) for n, k in _NUMBER.findall(_THOUSANDS.sub("", text))]


def _numbers(fact: str, said_on: date) -> list[float]:
    """The numbers a fact holds, less those of a date near the turn's day (a resolved relative date)."""
    def near(match: re.Match[str]) -> str:
        try:
            day = date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError:
            return match.group(0)
        return " " if abs((day - said_on).days) <= DATE_WINDOW_DAYS else match.group(0)
    years = {float(said_on.year + d) for d in (-1, 0, 1)}
    return [n for n in _values(_ISO_DATE.sub(near, fact)) if n not in years]


def unsaid_names(fact: str, *, said: OwnWords, earlier: list[str]) -> list[str]:
    """The names of `fact` found nowhere in the user's own words (this message or the earlier ones), looked up
    as `grounding` looks them up (which lets a name found nowhere at all pass: a model may spell or translate a
    name its own way, "Cologne" for "Köln")."""
    theirs = Source.of(said.text, *earlier)
    unsaid = []
    for name in names(fact):
        spaced = not _uncased(name)
        folded = _folded(name).removesuffix("s") if spaced else _folded(name)
        if not (theirs.has(folded, spaced=spaced) or theirs.has(_folded(name), spaced=spaced)):
            unsaid.append(name)
    return unsaid


def grounding(fact: str, *, said: OwnWords, earlier: list[str], elsewhere: str, said_on: date) -> Drop | None:
    """Why `fact` is not grounded in the user's words (NOT_USERS_WORDS, UNSUPPORTED), or None when it is
    (see the module docstring). `earlier` are the user's own words before this message; `elsewhere` is
    the text the turn showed that is not the user's."""
    theirs, other = Source.of(said.text, *earlier), Source.of(elsewhere, said.left_out)
    for name in unsaid_names(fact, said=said, earlier=earlier):
        if other.has(_folded(name), spaced=not _uncased(name), near=False):
            return Drop.NOT_USERS_WORDS
    for number in _numbers(fact, said_on):
        if number <= SMALL_NUMBER or (number.is_integer() and YEARS[0] <= number <= YEARS[1]) or number in theirs.numbers:
            continue
        return Drop.NOT_USERS_WORDS if number in other.numbers else Drop.UNSUPPORTED
    return None
