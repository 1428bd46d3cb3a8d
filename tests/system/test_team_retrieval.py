"""A chat turn reads the user's teams' memories too (retrieval/retrieve.py, docs/TEAMS.md): marked as the team's,
after the user's own, for current members only, on the SQL path and on the in-process indexes alike."""

from __future__ import annotations

from typing import Any

import pytest

from memory_proxy.retrieval.indexes import Indexes
from memory_proxy.store import teams
from memory_proxy.store.teams import Holder
from tests.support.data import BUN, CHAT, DENO, RUNTIME_Q, USER_A, USER_B
from tests.support.proxy import add_memory, chat_body, fillers, metric, sent_body, system_text, user_headers
from tests.support.servers import until

PLATFORM = "platform"


async def platform_team(db: Any, *members: str, memories: tuple[str, ...] = (DENO,)) -> list[str]:
    """The team "Platform" with `members`, holding `memories` (written as the team's principal)."""
    await teams.create_team(db, PLATFORM, "Platform")
    for member in members:
        await teams.set_member(db, PLATFORM, member)
    return [await add_memory(db, Holder.team(PLATFORM).principal, text) for text in memories]


async def turn(client: Any, user: str, outside: Any) -> tuple[list[str], str]:
    """The memory ids a chat turn injected, and the system prompt the upstream received."""
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(user))
    assert response.status_code == 200
    return response.json()["memories"], system_text(sent_body(outside))


async def test_a_member_reads_the_teams_memory_marked_as_the_teams(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    bun = await add_memory(db, USER_A, BUN)
    [deno] = await platform_team(db, USER_A)
    client = await proxy()
    ids, system = await turn(client, USER_A, outside)
    assert ids == [bun, deno]  # the user's own first
    assert '(team "Platform") "The team\'s JavaScript runtime for every project is Deno."' in system
    assert system.index(BUN) < system.index("Deno")


@pytest.mark.parametrize("who", ["stranger", "member of another team"])
async def test_nobody_else_reads_the_teams_memory(proxy: Any, outside: Any, db: Any, who: str) -> None:
    await platform_team(db, USER_A)
    if who == "member of another team":
        await teams.create_team(db, "billing", "Billing")
        await teams.set_member(db, "billing", USER_B)
    await fillers(db, USER_B)
    client = await proxy()
    ids, system = await turn(client, USER_B, outside)
    assert ids == [] and "Deno" not in system and "team" not in system


@pytest.mark.parametrize("index_mb", ["0", "256"])  # PostgreSQL only; the in-process indexes once held
async def test_a_removed_member_reads_nothing_from_the_next_turn_on(proxy: Any, outside: Any, db: Any,
                                                                    index_mb: str) -> None:
    await fillers(db, USER_A)
    [deno] = await platform_team(db, USER_A)
    client = await proxy(RETRIEVAL_INDEX_MB=index_mb)
    held: Indexes = client.app.state.services.indexes
    assert (await turn(client, USER_A, outside))[0] == [deno]
    if index_mb != "0":  # the user's and the team's indexes held: the next turn is searched without SQL
        await until(lambda: held.get(USER_A) is not None and held.get(Holder.team(PLATFORM).principal) is not None)
        hits = metric("memory_proxy_index_lookups_total", result="hit")
        assert (await turn(client, USER_A, outside))[0] == [deno]
        assert metric("memory_proxy_index_lookups_total", result="hit") == hits + 2
    removed = await client.delete(f"/api/v1/teams/{PLATFORM}/members/{USER_A}")
    assert removed.status_code == 200
    ids, system = await turn(client, USER_A, outside)  # at once: no notification is waited for
    assert ids == [] and "Deno" not in system


async def test_a_removal_not_heard_by_the_index_is_still_enforced(proxy: Any, outside: Any, db: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another replica removes the member: the team's index here still holds the memory, and the confirmation
    read, in the user's scope, no longer sees it."""
    await fillers(db, USER_A)
    [deno] = await platform_team(db, USER_A)
    client = await proxy()
    held: Indexes = client.app.state.services.indexes
    await turn(client, USER_A, outside)
    await until(lambda: held.get(USER_A) is not None and held.get(Holder.team(PLATFORM).principal) is not None)
    monkeypatch.setattr(held, "changed", lambda key: None)  # nothing is heard
    await teams.remove_member(db, PLATFORM, USER_A)
    ids, system = await turn(client, USER_A, outside)
    assert deno in held.fresh(Holder.team(PLATFORM).principal).position  # type: ignore[union-attr]
    assert ids == [] and "Deno" not in system


@pytest.mark.parametrize("index_mb", ["0", "256"])
async def test_a_team_joined_since_the_last_turn_is_read_at_once(proxy: Any, outside: Any, db: Any,
                                                                 index_mb: str) -> None:
    await fillers(db, USER_A)
    [deno] = await platform_team(db)
    client = await proxy(RETRIEVAL_INDEX_MB=index_mb)
    held: Indexes = client.app.state.services.indexes
    assert (await turn(client, USER_A, outside))[0] == []
    if index_mb != "0":
        await until(lambda: held.get(USER_A) is not None)
    assert held.teams_of(USER_A) == ()
    await teams.set_member(db, PLATFORM, USER_A)
    assert (await turn(client, USER_A, outside))[0] == [deno]
    assert held.teams_of(USER_A) == (teams.TeamRef(PLATFORM, "Platform"),)


async def test_a_small_teams_memories_are_searched_in_its_index(proxy: Any, outside: Any, db: Any) -> None:
    """A user with fewer than five memories is searched in SQL (with the global memories); a team of one
    memory is held like any other."""
    await fillers(db, USER_A)
    [deno] = await platform_team(db, USER_A)
    client = await proxy()
    held: Indexes = client.app.state.services.indexes
    await turn(client, USER_A, outside)
    await until(lambda: held.get(Holder.team(PLATFORM).principal) is not None)
    assert list(held.get(Holder.team(PLATFORM).principal).position) == [deno]  # type: ignore[union-attr]


async def test_a_team_memory_saying_what_the_users_own_says_is_left_out(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    mine = await add_memory(db, USER_A, DENO)
    await platform_team(db, USER_A)
    client = await proxy()
    ids, system = await turn(client, USER_A, outside)
    assert ids == [mine] and "(team \"" not in system


async def test_team_memories_per_turn_are_capped_and_can_be_turned_off(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    words = [f"The team's JavaScript runtime for project {n} is Deno {n}." for n in range(5)]
    others = [f"The team's filler fact number {n} about nothing." for n in range(10)]  # the words stay rare
    await platform_team(db, USER_A, memories=(*words, *others))
    two = await proxy(RETRIEVAL_TEAM_TOP_K="2")
    assert len((await turn(two, USER_A, outside))[0]) == 2
    none = await proxy(RETRIEVAL_TEAM_TOP_K="0")
    ids, system = await turn(none, USER_A, outside)
    assert ids == [] and "(team \"" not in system


async def test_a_team_memory_is_counted_as_the_teams_use(proxy: Any, outside: Any, db: Any) -> None:
    await fillers(db, USER_A)
    [deno] = await platform_team(db, USER_A)
    client = await proxy()
    await turn(client, USER_A, outside)
    assert await client.app.state.services.uses.flush() == 1
    cur = await db.execute("SELECT user_id, access_count FROM users_vectors WHERE vector_id = %s", [deno])
    assert await cur.fetchall() == [(Holder.team(PLATFORM).principal, 1)]


async def test_a_small_teams_memories_all_come_and_a_pinned_one_always(proxy: Any, outside: Any, db: Any) -> None:
    """A team of at most RETRIEVAL_INJECT_ALL_BELOW memories is shown whole, whatever the question's language (as
    a small user is); a large team's pinned memory comes on every turn with a question."""
    await fillers(db, USER_A)
    [deno, other] = await platform_team(db, USER_A, memories=(DENO, "The team's stand-up is at 9:30."))
    client = await proxy(RETRIEVAL_INJECT_ALL_BELOW="10")
    ids, _ = await turn(client, USER_A, outside)
    assert {deno, other} <= set(ids)  # the stand-up holds none of the question's words
    await fillers(db, Holder.team(PLATFORM).principal, 12)  # now a large team: searched only
    ids, _ = await turn(client, USER_A, outside)
    assert deno in ids and other not in ids
    await db.execute("UPDATE users_vectors SET pinned = true WHERE vector_id = %s", [other])
    assert {deno, other} <= set((await turn(client, USER_A, outside))[0])


@pytest.mark.parametrize("index_mb", ["0", "256"])  # in PostgreSQL; in the in-process indexes
async def test_a_turn_reads_the_teams_joined_last_and_no_more(proxy: Any, outside: Any, db: Any,
                                                              index_mb: str) -> None:
    """A user in more teams than MAX_TEAMS_READ: each team read costs the turn a statement or a search on the
    event loop, so a turn reads the memberships added last, a bounded number of them."""
    await fillers(db, USER_A)
    pinned = []
    for n in range(teams.MAX_TEAMS_READ + 2):
        await teams.create_team(db, f"t{n:02}", f"Team {n}")
        await teams.set_member(db, f"t{n:02}", USER_A)
        memory = await add_memory(db, Holder.team(f"t{n:02}").principal, f"The team's stand-up room is number {n}.")
        await db.execute("UPDATE users_vectors SET pinned = true WHERE vector_id = %s", [memory])
        pinned.append(memory)
    client = await proxy(RETRIEVAL_INDEX_MB=index_mb, INJECT_TOKEN_BUDGET="4000")
    held: Indexes = client.app.state.services.indexes
    ids, _ = await turn(client, USER_A, outside)
    assert set(ids) == set(pinned[2:])  # every pinned memory of the 20 teams joined last
    assert [t.id for t in held.teams_of(USER_A) or ()] == [f"t{n:02}" for n in reversed(range(2, len(pinned)))]
    if index_mb != "0":  # the next turn searches the indexes held, and no other team's
        await until(lambda: all(held.get(k) is not None for k in [USER_A, *(Holder.team(f"t{n:02}").principal
                                                                          for n in range(2, len(pinned)))]))
        assert held.get(Holder.team("t00").principal) is None
        ids, _ = await turn(client, USER_A, outside)
        assert set(ids) == set(pinned[2:])
