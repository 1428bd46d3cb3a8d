"""store/scoring.py: each formula's SQL rendering computes in PostgreSQL what the formula computes in Python,
on the column types the search statement gives it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memory_proxy.store import scoring, search
from memory_proxy.store.scoring import Sql


def test_an_expression_is_written_in_the_order_python_evaluates_it() -> None:
    x = Sql("x")
    assert str(1 - x / 2 * x + 0.5) == "((1 - ((x / 2) * x)) + 0.5)"
    assert str(scoring.idf(Sql("n"), Sql("df"))) == "ln((1 + (((n - df) + 0.5) / (df + 0.5))))"
    assert str(scoring.most_holders(Sql("n"), 0.5)) == "greatest((0.5 * n), 1)"


def test_the_search_statement_embeds_the_rendered_formulas() -> None:
    for rendered in (search._BM25, search._MOST_HOLDERS, search._RRF):
        assert str(rendered) in search._STATEMENT


ROWS = [(10, 1, 1, 4, 3.5), (10, 5, 2, 7, 3.5), (1, 1, 3, 1, 1.0), (10_000, 4_999, 1, 40, 12.25)]


async def test_bm25_in_postgresql_is_bm25_in_numpy(db: Any) -> None:
    """n, df, tf, dl are integers and avgdl a float8 there, as in memory_term_stats and memory_terms."""
    expression = scoring.bm25(scoring.idf(Sql("n"), Sql("df")), Sql("tf"), Sql("dl"), Sql("avgdl"),
                              Sql("%(k1)s"), Sql("%(b)s"))
    sql = (f"SELECT {expression} FROM (VALUES "
           + ", ".join(f"({n}, {df}, {tf}, {dl}, {avgdl}::float8)" for n, df, tf, dl, avgdl in ROWS)
           + ") AS t(n, df, tf, dl, avgdl)")
    cur = await db.execute(sql, {"k1": scoring.BM25_K1, "b": scoring.BM25_B})
    in_sql = [row[0] for row in await cur.fetchall()]
    in_numpy = [float(scoring.bm25(scoring.idf(n, df), np.array([float(tf)]), np.array([float(dl)]), avgdl)[0])
                for n, df, tf, dl, avgdl in ROWS]
    assert in_sql == pytest.approx(in_numpy, rel=1e-12)
    assert len(set(in_numpy)) == len(ROWS)


async def test_the_common_word_cutoff_and_the_fusion_in_postgresql_are_numpys(db: Any) -> None:
    for n in (0, 1, 3, 10, 10_001):
        cur = await db.execute(f"SELECT {scoring.most_holders(Sql('%(n)s::bigint'), Sql('%(common)s'))}",
                               {"n": n, "common": scoring.COMMON_TERM_SHARE})
        assert (await cur.fetchone())[0] == pytest.approx(scoring.most_holders(n))
    ranks = np.arange(1, 6)
    cur = await db.execute(f"SELECT {scoring.rrf(Sql('%(weight)s::float8'), Sql('rank'), Sql('%(k)s'))}"
                           " FROM generate_series(1, 5) AS rank ORDER BY rank", {"weight": 0.7, "k": 60})
    assert [row[0] for row in await cur.fetchall()] == pytest.approx(list(scoring.rrf(0.7, ranks, 60)), rel=1e-15)
