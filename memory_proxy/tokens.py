"""Token counting for the injection budget (a leaf: imports nothing from the package).

The budget is a guard against flooding the prompt, not a billing figure, so an estimate that errs on
the high side is enough: ceil(UTF-8 bytes / 3.5). English prose runs about 4 bytes per token in the
BPE tokenizers of OpenAI and Mistral, other scripts fewer, so this over-counts slightly for English
and stays close for accented text. tiktoken would be exact for OpenAI models only and downloads its
encodings at first use, which an offline install cannot do.
"""

from __future__ import annotations

import math

BYTES_PER_TOKEN = 3.5


def count_tokens(text: str) -> int:
    return tokens_of(len(text.encode("utf-8", "replace")))


def tokens_of(size: int) -> int:
    """The estimate for a text of `size` UTF-8 bytes."""
    return math.ceil(size / BYTES_PER_TOKEN)
