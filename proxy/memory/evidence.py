"""What the user said in their own words, and whether a fact rests on them. Pure functions, no model.

A memory is only ever formed from the user's own words, so that neither a small model's inventions nor
text the user merely passed along can become "facts about the user":

- `own_words(message)` keeps the user's own sentences and drops what is not theirs or not meant:
  OpenWebUI's RAG wrapper (only the `<user_query>` is the user's), fenced code, block quotes, text
  between separator lines (`---`: pasted e-mails and documents), long quoted passages, prompt tags
  and chat-template tokens (removed, the sentence kept), sentences that address a machine ("SYSTEM:",
  "ignore previous instructions", "note to the AI", statements about "the user" in the third person),
  sentences that are hypothetical or jokes ("if I had…", "imagine…", "lol", a following "kidding"), and
  sentences that held a secret (redacted before the job was written: "My key is [REDACTED: api_key]").
- `supported(fact, said, known)`: the fact rests on the user's own statements (requests to the
  assistant are not statements) together with what is already known about them: every name and number
  appears there, a third of its other content words do (stemmed; paraphrases such as "enjoys" for
  "love" are not required), and at least one word is from this message. Text that is not English is
  held to names and numbers only: facts are written in English, so its words cannot be compared (a
  translation is not an invention).
- `forget_target(words)`: the object of a request to forget ("please forget that I live in Lyon").

The same word helpers (`content_stems`, `names`) serve the resolution rules (memory/resolve.py).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from .lexemes import stem

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")

_RAG_QUERY = re.compile(r"<user_query>\s*(.*?)\s*</user_query>", re.S | re.I)
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.S)
_BLOCK_QUOTE = re.compile(r"^[ \t]*>.*$", re.M)
_SEPARATED = re.compile(r"^[ \t]*([-=*_~])\1{2,}[ \t]*$.*?(?:^[ \t]*\1{3,}[ \t]*$|\Z)", re.S | re.M)
_LONG_QUOTE = re.compile(r'["“”«»„]([^"“”«»„\n]{40,})["“”«»„]')  # someone else's words, not the user's
_TAGS = re.compile(r"<\|[^|>\n]{1,30}\|>|</?[a-z_][a-z0-9_-]{0,30}\s*/?>", re.I)  # <user_message>, <|im_end|>
_MACHINE_ADDRESSED = re.compile(r"""(?ix)
    ^\W*(system|assistant|ai|memory|instructions?)\s*:          # role labels
  | \b(ignore|disregard|override)\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|system)\s
  | \b(note|message|instructions?|reminder)\s+(to|for)\s+(the\s+|all\s+|any\s+)?(ai|assistants?|models?|llms?|memory|system|bots?)\b
  | \b(ai|llm)\s+(assistants?|models?|systems?)\b
  | \b(new|updated)\s+(memory|memories|instructions?|system\s+prompt)\b
  | \bthe\s+user(['’]s|\s+(is|has|wants|prefers|likes|lives|works|asked|would|authori[sz]ed|must|should))\b
""")
_HYPOTHETICAL = re.compile(r"""(?ix)
    \b(if\s+i|if\s+we|imagine|suppose|pretend|what\s+if|hypothetically|in\s+my\s+dreams?|i\s+wish|if\s+only)\b
  | \b(lol|lmao|haha+|hehe+|jk|just\s+kidding|kidding|joking)\b
""")
_RETRACTION = re.compile(r"(?i)^\W*(just\s+)?(kidding|joking|jk)\W*$")
_QUESTION = re.compile(r"""(?ix)^\W*(how|what|what's|where|which|why|when|who|whom|whose|can|could|should|would
  |will|shall|is|are|am|do|does|did|have|has|any)\b[^.!]*\?\W*$""")  # asks; states nothing
_REQUEST = re.compile(r"""(?ix)^\W*(please\s+|pls\s+|now\s+|so\s+)?(
    (can|could|would|will)\s+you | write | tell | explain | give | make | show | create | generate | translate
  | summari[sz]e | list | draft | compose | suggest | recommend | describe | help | plan | find | fix | review
  | rewrite | check | convert | (did|do)\s+you\s+know | have\s+you\s+heard
  | i\s+(need|want|would\s+like|'d\s+like)\s+(a|an|some|help|you|to\s+know) )\b""")
_FORGET = re.compile(r"""(?ix)
    ^\W*(?:please\s+|kindly\s+|(?:can|could|would|will)\s+you\s+(?:please\s+)?)?   # a request: "Please forget…"
      (?:forget|unlearn|stop\s+remembering)\s+(?:about\s+|that\s+|what\s+|everything\s+)*(?P<a>[^.!?\n]*)
  | \b(?:forget|unlearn|stop\s+remembering|don['’]?t\s+remember|do\s+not\s+remember)\s+   # "…and forget that…"
      (?:(?:about|that|what|everything|all|the\s+fact\s+that)\b\s*)+(?P<b>[^.!?\n]*)
  | \b(?:delete|remove|erase|drop|clear)\s+(?:what\s+you\s+(?:know|remember)|the\s+memory|your\s+memory
      |(?:it\s+)?from\s+(?:your\s+)?memory|that\s+memory|everything\s+you\s+know)\b\s*(?:about|of|that)?\s*(?P<c>[^.!?\n]*)
""")
_PEOPLE = frozenset("""
brother brothers sister sisters mother mom mum father dad parents parent wife husband partner girlfriend
boyfriend fiance fiancee friend friends colleague colleagues coworker coworkers co-worker boss manager son
sons daughter daughters kid kids child children neighbour neighbor neighbours neighbors roommate flatmate
cousin uncle aunt grandma grandpa grandmother grandfather teammate teammates ex
""".split())  # noqa: SIM905
_POSSESSED = re.compile(r"^\W*(?:[Mm]y|MY|[Oo]ur|OUR)\s+([\w-]+)(?:,?\s+([A-Z][\w'-]+))?")
_NAMED = re.compile(r"^\W*([A-Z][a-z]+)\s+(?:is|was|has|had|lives|works|loves|likes|owns|plays|went|moved)\b")
_PRONOUN = re.compile(r"(?i)^\W*(he|she|they)\b")
_REDACTED = re.compile(r"\[REDACTED: \w+\]")  # proxy/redact.py's placeholder: the sentence was about a secret
_OMITTED = " […] "

# Words a fact may add when it rephrases the user ("User enjoys…", "User's name is…", "34 years old"): they
# carry no evidence either way, so they are neither required nor counted.
_GENERIC = frozenset("""
i i'm i've i'd i'll me my mine myself you your yours we we're our ours us
user user's users a an the and or but of to in on at for with from by as into about than then that this these
those who whom whose which what when where it its it's their theirs they them he him his she her hers is are
was were be been being am has have had having do does did done can could will would should may might must
also very really quite just currently now still often usually always sometimes mostly mainly generally
named called name names years year old age aged new like likes liked enjoys enjoy enjoyed love loves loved
prefers prefer preferred tells told tell says said say know knows known remember please person people
someone something thing things lot lots much many some any every each own one two
""".split())  # noqa: SIM905 - word lists read better as text
# Function words that tell English text from French, German, Spanish, Italian, Portuguese and Dutch
# (words shared by several of them, such as "a", "in", "me", are in neither list).
_ENGLISH = frozenset("""
i i'm i've i'd i'll my we our you your the and or but is are was were to of for with it this that
have has not what how can will be at from
""".split())  # noqa: SIM905
_NOT_ENGLISH = frozenset("""
je j'ai j'habite tu il elle nous vous ils et est sont le la les des du une un au aux avec pour dans sur mon
ma mes ich du er sie wir ihr und ist sind der die das den dem nicht mit ein eine einen mein meine meiner
bin yo el los las una y es son con por para mi mis tengo vivo io il lo gli di che per non sono ho mio mia
eu os um uma ele ela com meu minha ik jij het een niet van mijn ben heb
""".split())  # noqa: SIM905
_NEGATION = frozenset("not no never don't doesn't didn't isn't aren't wasn't anymore longer quit stopped".split())  # noqa: SIM905


@dataclass(frozen=True, slots=True)
class OwnWords:
    """The user's own sentences of one message, and whether they are English. Requests to the assistant
    ("Write me a poem about cats") and questions ("How do I reverse a list?") are among the sentences, for
    the model's understanding, but are no evidence of a fact: `statements` are the rest."""

    sentences: tuple[str, ...]
    english: bool

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    @property
    def statement_sentences(self) -> list[str]:
        return [s for s in self.sentences if not (_REQUEST.match(s) or _QUESTION.match(s))]

    @property
    def statements(self) -> str:
        return " ".join(self.statement_sentences)


@dataclass(frozen=True, slots=True)
class Evidence:
    """The words a fact may rest on: stems and folded words of the user's statements and of what is
    already known about them."""

    stems: frozenset[str]
    plain: frozenset[str]

    @classmethod
    def of(cls, texts: list[str]) -> Evidence:
        joined = "\n".join(texts)
        return cls(frozenset(content_stems(joined, keep_generic=True)), frozenset(words(joined)))


def _folded(word: str) -> str:
    """Lowercase, accents removed, curly apostrophes straight: "Montréal" and "montreal" are one word."""
    decomposed = unicodedata.normalize("NFKD", word.lower().replace("’", "'"))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str) -> list[str]:
    return [_folded(w) for w in _WORD.findall(text)]


def content_stems(text: str, *, keep_generic: bool = False) -> list[str]:
    """The stems of the words that carry content (all words when `keep_generic`), possessives dropped."""
    found = [w.removesuffix("'s") for w in words(text)]
    return [stem(w) for w in found if keep_generic or (w not in _GENERIC and not w.isdigit())]


def names(fact: str) -> list[str]:
    """Names and numbers a fact holds: capitalised words past the first one ("Bun", "Lisbon"), digits."""
    found = _WORD.findall(fact)
    return [_folded(w).removesuffix("'s") for i, w in enumerate(found)
            if w.isdigit() or (i > 0 and w[:1].isupper() and _folded(w) not in ("user", "user's", "i"))]


def negated(text: str) -> bool:
    return any(w in _NEGATION for w in words(text))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def own_words(message: str) -> OwnWords:
    """The sentences of `message` that are the user's own statements (see the module docstring)."""
    query = _RAG_QUERY.search(message)
    text = query.group(1) if query else message
    for pasted in (_FENCED, _SEPARATED, _BLOCK_QUOTE, _LONG_QUOTE):
        text = pasted.sub(_OMITTED, text)
    text = _TAGS.sub(" ", text)
    kept: list[str] = []
    for sentence in _sentences(text):
        if _RETRACTION.match(sentence):
            if kept:
                kept.pop()
            continue
        if _MACHINE_ADDRESSED.search(sentence) or _HYPOTHETICAL.search(sentence) or _REDACTED.search(sentence):
            continue
        kept.append(sentence)
    found = words(" ".join(kept))
    english = sum(w in _ENGLISH for w in found) >= sum(w in _NOT_ENGLISH for w in found)
    return OwnWords(tuple(kept), english)


def _present(wanted: str, have: frozenset[str]) -> bool:
    """`wanted` among `have`, or sharing a stem-sized prefix with one of them (engineer ~ engineering)."""
    if wanted in have:
        return True
    prefix = wanted[:5]
    return len(prefix) >= 4 and any(w.startswith(prefix) for w in have)


def about_someone_else(sentence: str) -> set[str] | None:
    """Who a sentence is about when it is someone other than the user: the words that name them ("My
    brother lives in Seattle" → {"brother"}, "My colleague Dave is…" → {"colleague", "dave"}, "Dave is…"
    → {"dave"}, "She…" → {"she"}); None when it may be about the user."""
    possessed = _POSSESSED.match(sentence)
    if possessed and _folded(possessed.group(1)) in _PEOPLE:
        return {_folded(w) for w in possessed.groups() if w}
    named = _NAMED.match(sentence)
    if named:
        return {_folded(named.group(1))}
    pronoun = _PRONOUN.match(sentence)
    return {_folded(pronoun.group(1))} if pronoun else None


def _misattributed(fact: str, statements: list[str]) -> bool:
    """A fact about the user themself ("User lives in Seattle.") taken only from sentences about someone
    else ("My brother lives in Seattle.") without naming them."""
    fact_words = set(words(fact))
    if fact_words & {"user's"}:
        return False
    stems = set(content_stems(fact)) | set(names(fact))
    sources = [s for s in statements if stems & (set(content_stems(s)) | set(words(s)))]
    others = [about_someone_else(s) for s in sources]
    return bool(sources) and all(o is not None and not o & fact_words for o in others)


def supported(fact: str, said: OwnWords, known: list[str]) -> bool:
    """Does `fact` rest on the user's own statements, taken with what is `known` about them (a fact may
    combine both: "switched to Node" + "uses Bun for JavaScript" → "uses Node for JavaScript")? Every
    name and number must be there, at least a third of the other content words (for English text), and
    at least one word must come from this message: a fact made of known words only is no news."""
    if _misattributed(fact, said.statement_sentences):
        return False
    own, with_known = Evidence.of([said.statements]), Evidence.of([said.statements, *known])
    fact_names, stems = names(fact), content_stems(fact)
    if not all(_present(n, with_known.plain) for n in fact_names):
        return False
    if not any(_present(n, own.plain) for n in fact_names) and not any(_present(s, own.stems) for s in stems):
        return not said.english and bool(stems) and not fact_names  # a translation shares no word
    if not said.english or not stems:
        return True
    return 3 * sum(_present(s, with_known.stems) for s in stems) >= len(stems)


def forget_target(said: OwnWords) -> tuple[str, str] | None:
    """(the sentence asking to forget, what to forget) when the user asks to forget something."""
    for sentence in said.sentences:
        match = _FORGET.search(sentence)
        if match:
            return sentence, next((g for g in match.groups() if g), "").strip(" ,;:")
    return None
