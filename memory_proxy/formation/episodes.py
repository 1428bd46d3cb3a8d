"""The episodic tier (EPISODES): the user's own words of a chat turn kept as memories of type `episode`.

A fact formed by a small model loses what it did not extract; the user's words lose nothing, and raw-turn
retrieval answers more LoCoMo questions than facts do (docs/BENCHMARKS.md#answers). So each turn's own words
(formation/evidence.own_words: without what the user pasted or quoted, redacted like every memory) are kept
beside the facts formed from them, in pieces of at most PIECE_BYTES cut between words, dated by the turn.

An episode is searched and injected as any memory, but never compared with a fact nor replaced by one (the
facts' neighbours leave episodes out: store/search.neighbour_facts), never counted under MAX_MEMORIES_PER_USER:
past MAX_EPISODES_PER_USER the oldest are retired (formation/write.py). A request to forget reaches episodes
as it reaches facts; export and erasure take them with the rest.
"""

from __future__ import annotations

from datetime import datetime

from ..embedding.embedders import Embedder
from ..embedding.memory_document import embedding_text
from ..records import FactAttributes
from ..settings import EPISODE, FormationSettings
from .memory_text import MAX_MEMORY_BYTES, memory_content
from .resolve import Resolution

MAX_EPISODES_PER_TURN = 4  # pieces of one turn's words kept: the rest of a long message is a document's length
PIECE_BYTES = MAX_MEMORY_BYTES // 2  # room for redaction to lengthen a piece ("[REDACTED: api_key]")
WORD_BYTES = PIECE_BYTES // 4  # one "word" of a pasted blob cannot fill a piece
REASON = "the user's own words"


def episode_texts(words: str) -> list[str]:
    """The user's words (redacted with the job's payload) in pieces of at most PIECE_BYTES cut between words,
    each redacted again as every memory is; a piece left with nothing storable is left out. Pure (formation
    runs it in a worker process: the scan grows with the text)."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for word in words.split():
        word = word.encode("utf-8", "surrogatepass")[:WORD_BYTES].decode("utf-8", "ignore")
        if current and size + len(word.encode()) + 1 > PIECE_BYTES:
            pieces.append(" ".join(current))
            current, size = [], 0
            if len(pieces) == MAX_EPISODES_PER_TURN:
                break
        current.append(word)
        size += len(word.encode()) + 1
    else:
        if current:
            pieces.append(" ".join(current))
    contents = (memory_content(piece) for piece in pieces)
    return [c.text for c in contents if not c.problem]


async def episodes(texts: list[str], said_at: datetime, embedder: Embedder,
                   settings: FormationSettings) -> list[Resolution]:
    """The turn's episodes as decisions to write: each an add, dated by the turn, expiring as MEMORY_TTL_DAYS says."""
    if not texts:
        return []
    vectors = await embedder.embed([embedding_text(text, said_at) for text in texts])
    attributes = FactAttributes(memory_type=EPISODE, expires_at=settings.expiry(EPISODE, said_at))
    return [Resolution(text, vector, "add", None, REASON, attributes) for text, vector in zip(texts, vectors, strict=True)]
