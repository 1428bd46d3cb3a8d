"""Token counting for the injection budget and fair use (a leaf: imports nothing from the package).

The budget is a guard against flooding the prompt, not a billing figure, so an estimate that errs on
the high side is enough: ceil(UTF-8 bytes / 3.5). English prose runs about 4 bytes per token in the
BPE tokenizers of OpenAI and Mistral, other scripts fewer, so this over-counts slightly for English
and stays close for accented text. tiktoken would be exact for OpenAI models only and downloads its
encodings at first use, which an offline install cannot do.
"""

from __future__ import annotations

import math
from contextvars import ContextVar

BYTES_PER_TOKEN = 3.5
# The tokens the work under way spends on the outside world's models besides its own reply, added where each
# call learns them: a formation job's memory-LLM and embedding calls (formation/worker.py), a chat turn's
# query embedding (limits/meter.py). A list of one number, set by whoever counts them for the task and its
# children; None: nobody counts.
SPENT: ContextVar[list[int] | None] = ContextVar("spent_tokens", default=None)


def spent(tokens: int) -> None:
    """Tokens a call spent, added to the work under way's count (if any)."""
    if (tally := SPENT.get()) is not None:
        tally[0] += tokens


def count_tokens(text: str) -> int:
    return tokens_of(len(text.encode("utf-8", "replace")))


def tokens_of(size: int) -> int:
    """The estimate for a text of `size` UTF-8 bytes."""
    return math.ceil(size / BYTES_PER_TOKEN)
