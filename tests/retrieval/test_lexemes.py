"""retrieval/lexemes.py analyzes a query as PostgreSQL's to_tsvector('english', ...) does."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from memory_proxy.retrieval.lexemes import query_lexemes
from tests.support.data import LOCOMO

CASES = ["The organized user's well-known J.K. Rowling quote, 3.5 times!",
         "What did I say my favourite programming language was?",
         "Is my dog's name Rex or Max? Running, ran, runs.", "Montréal and e-mail in 2023", ""]


def to_tsvector(database_url: str, texts: list[str]) -> list[set[str]]:
    with psycopg.connect(database_url) as conn:
        return [set(conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [t]).fetchone()[0])
                for t in texts]


@pytest.mark.parametrize("text", CASES)
def test_a_query_has_the_words_postgresql_gives_it(database_url: str, text: str) -> None:
    mine = query_lexemes(text)
    assert set(mine) == to_tsvector(database_url, [text])[0]
    assert len(mine) == len(set(mine))


def test_the_locomo_questions_agree_with_postgresql(database_url: str) -> None:
    data: list[dict[str, Any]] = json.loads(LOCOMO.read_text())
    questions = [qa["question"] for conversation in data for qa in conversation["qa"]]
    theirs = to_tsvector(database_url, questions)
    same = sum(set(query_lexemes(q)) == t for q, t in zip(questions, theirs, strict=True))
    assert same / len(questions) >= 0.995  # 1,984 of 1,986 when written ("artists/bands", "and/or" differ)
