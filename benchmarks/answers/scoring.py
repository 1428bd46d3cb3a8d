"""How a reply is scored against a LoCoMo answer: LoCoMo's token F1, the answer's words found in the reply, and for an
adversarial question (category 5: the answer was never said) whether the reply says so.

- `f1`: LoCoMo's own (snap-research/locomo task_eval/evaluation.py): lower case, punctuation and articles off, the
  words stemmed (Porter: PyStemmer's English Snowball here, the stemmer the project ships), F1 of the two bags;
  for a multi-hop answer (category 1) of several parts separated by commas, the mean over parts of the best F1.
- `found`: at least half of the answer's content words (three letters or more, not a stop word) are in the reply,
  compared on their first five letters (benchmarks/formation_quality/locomo.py's test, used by every earlier
  figure here).
- `abstains`: the reply says the thing was not said or is not known ("not mentioned", "never said", "no
  information", "I don't know", …): the right answer to an adversarial question, whatever words follow.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

import httpx
import Stemmer

from ..formation_quality.locomo import found as words_found

_STEMMER = Stemmer.Stemmer("english")
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_ABSTAINS = re.compile(
    r"(not|never) (been )?(mentioned|said|stated|specified|discussed|provided|available|known|clear)|no (information|mention|"
    r"record|details?|indication|evidence)|(don't|do not|doesn't|does not|can't|cannot|could not|couldn't) "
    r"(know|say|find|recall|remember|tell|determine|see)|unknown|not sure|no idea|unclear|isn't (mentioned|said)",
    re.I)


def _tokens(text: str) -> list[str]:
    text = text.lower().replace(",", "")
    text = "".join(c for c in text if c not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return [_STEMMER.stemWord(w) for w in text.split()]


def _f1_one(prediction: str, truth: str) -> float:
    predicted, expected = _tokens(prediction), _tokens(truth)
    common = Counter(predicted) & Counter(expected)
    same = sum(common.values())
    if not same:
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, answer: str, category: int) -> float:
    """LoCoMo's F1 of a reply against an answer (the multi-hop form for category 1); for an adversarial question
    (category 5), 1 when the reply says it was not said, else 0 (as LoCoMo's evaluation scores it)."""
    if category == 5:
        return float(abstains(prediction))
    if category == 1:
        parts = [p.strip() for p in answer.split(",") if p.strip()]
        predicted = [p.strip() for p in prediction.split(",") if p.strip()] or [prediction]
        return sum(max(_f1_one(p, part) for p in predicted) for part in parts) / len(parts) if parts else 0.0
    return _f1_one(prediction, answer)


def abstains(reply: str) -> bool:
    return bool(_ABSTAINS.search(reply))


def holds_answer(reply: str, answer: str, category: int) -> bool:
    """The reply holds the answer: its words found, or, for an adversarial question, a reply that says it was not
    said."""
    return abstains(reply) if category == 5 else words_found(answer, [reply])


JUDGE_PROMPT = """You grade an assistant's reply to a question about a conversation, against the right answer.
Question: {question}
Right answer: {answer}
Reply: {reply}
Is the reply right? It is right when it gives the right answer (other words for the same thing, the same date or
period written differently), even at length; wrong when it gives another answer, none, or several of which one is
wrong. Answer with one word: CORRECT or WRONG."""
JUDGE_ADVERSARIAL = """You grade an assistant's reply to a question about a conversation.
Question: {question}
The conversation never said this. A right reply says it is not known, not mentioned or not remembered (it may add
what it does know); a wrong reply answers the question as if it had been said.
Reply: {reply}
Answer with one word: CORRECT or WRONG."""


async def judge(base_url: str, question: Any, reply: str) -> bool:
    """A judge model's verdict on a reply (temperature 0)."""
    prompt = (JUDGE_ADVERSARIAL if question.category == 5 else JUDGE_PROMPT).format(
        question=question.asked, answer=question.answer, reply=reply or "(nothing)")
    async with httpx.AsyncClient(timeout=600) as client:
        models = await client.get(f"{base_url}/models")
        model = models.json()["data"][0]["id"]
        response = await client.post(f"{base_url}/chat/completions", json={
            "model": model, "temperature": 0, "max_tokens": 5, "messages": [{"role": "user", "content": prompt}]})
        response.raise_for_status()
    return "CORRECT" in response.json()["choices"][0]["message"]["content"].upper()
