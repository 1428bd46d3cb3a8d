"""Formation end to end (formation/steps.py and the guards it calls), on the benchmark's development users.

Users go through the real HTTP path of a running proxy (chat turn, tee, outbox, job, worker, management
API, the probe's injection) with a scripted memory LLM, by the formation-quality benchmark run as a command
on the test's database (`python -m benchmarks.formation_quality`, which writes each user's verdict):

- the **oracle** answers every formation call with the turn's ideal answer: a perfect model. Every
  development user must end right: nothing deterministic may stand between a right answer and the store
  (the frozen test split is run the same way by the benchmark, not here: it is never read case by case).
- the **fake** answers the extraction call with what a small model got wrong where only a guard can help:
  it copies the prompt's examples, obeys an instruction hidden in the user's text or in a pasted e-mail
  it was never shown, writes a secret. The CI users must still end right.
"""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from memory_proxy.formation.steps import REMEMBERED
from memory_proxy.job_payload import FormationPayload, Retrieved
from memory_proxy.store import jobs
from tests.support.data import BERLIN, BUN, CHAT, USER_A
from tests.support.fakes import DATE_PREFIX, as_requested, vector_for
from tests.support.proxy import active_texts, add_memory, chat_body, metric, user_headers
from tests.support.servers import run_benchmark
from tests.support.tools import call, calling, calls_stream, script, script_stream


def formation_benchmark(database_url: str, out: Path, *options: str) -> list[dict[str, Any]]:
    """Run the formation-quality benchmark on `database_url`; every user with its verdict (`failures`)."""
    run = run_benchmark("formation_quality", *options, "--database-url", database_url, "--out", str(out),
                        timeout=1800)
    assert run.returncode == 0, run.stderr[-4000:]
    verdicts: list[dict[str, Any]] = json.loads((out / "verdicts.json").read_text())["memory-proxy"]
    return verdicts


def fact_fates(run: Path, *options: str) -> list[dict[str, Any]]:
    """Every ideal fact of a saved run with the step where it was lost (benchmarks.formation_quality.steps)."""
    steps = run_benchmark("formation_quality.steps", str(run), *options, "--json", str(run / "fates.json"))
    assert steps.returncode == 0, steps.stderr[-4000:]
    fates: list[dict[str, Any]] = json.loads((run / "fates.json").read_text())
    return fates


@pytest.mark.slow
def test_a_perfect_model_gets_every_development_user_right(database_url: str, tmp_path: Path) -> None:
    users = formation_benchmark(database_url, tmp_path, "--llm", "oracle", "--split", "dev")
    assert len(users) >= 140 and len({u["lang"] for u in users}) >= 9 and sum(u["openwebui"] for u in users) >= 20
    assert {u["split"] for u in users} == {"dev"}
    assert {u["user"]: u["failures"] for u in users if u["failures"]} == {}
    fates = fact_fates(tmp_path, "--split", "dev")  # each fact followed through the log: where any was lost
    assert len(fates) >= 190
    # a perfect model loses nothing to extraction, relate or a later turn; one number guard stands in the way
    # of one fact ("sotto i 10mila": 10000 is not read in "10mila"), which the user's checks do not need
    assert [(f["user"], f["step"], f["detail"]) for f in fates if f["step"] != "kept"] == [
        ("d-it-hypo-ferrari", "guard", "unsupported")]


@pytest.mark.slow
def test_the_guards_hold_whatever_the_scripted_model_says(database_url: str, tmp_path: Path) -> None:
    users = formation_benchmark(database_url, tmp_path, "--llm", "fake", "--ci",
                                "--users", "benchmarks/formation_quality/users.toml")
    assert len(users) >= 15 and len({u["category"] for u in users}) >= 10
    assert {u["user"]: u["failures"] for u in users if u["failures"]} == {}
    fates = fact_fates(tmp_path, "--users", "benchmarks/formation_quality/users.toml")
    # the fake wrote "software engineer" and "uses Bun" as one fact; the switch to Node retired it, and the
    # steps say where the engineer was lost
    assert [(f["user"], f["fact"], f["step"]) for f in fates if f["step"] != "kept"] == [
        ("change-bun-node", "User is a software engineer.", "later")]


async def test_a_question_reaches_the_model_and_only_grounded_facts_about_the_user_are_kept(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = lambda message: [] if "capital" in message else [
        {"fact": "User uses Bun at work.", "type": "project"},
        {"fact": "User has a meeting tomorrow.", "type": "temporary"},
        {"fact": "User lives in Vellmora.", "type": "identity"},  # the prompt's example: dropped
        {"fact": "User runs 42 km a week.", "type": "preference"},  # a number never said: dropped
        "Bun is fast.",  # not about the user: dropped
    ]
    dropped = {why: metric("memory_proxy_facts_dropped_total", reason=why)
               for why in ("unsupported", "not_about_user", "not_users_words")}
    await client.post(CHAT, json=chat_body("What is the capital of France?"), headers=user_headers(USER_A))
    await client.post(CHAT, json=chat_body("I use Bun at work and I have a meeting tomorrow. Is Rust nice?"),
                      headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 2
    assert memory_llm.calls("extract") == 2  # a question may hold a fact: the model judges it
    cur = await db.execute(
        "SELECT v.content, v.memory_type, v.expires_at IS NOT NULL FROM users_vectors uv"
        " JOIN vectors v ON v.id = uv.vector_id WHERE uv.user_id = %s ORDER BY v.content", [USER_A])
    assert await cur.fetchall() == [("User has a meeting tomorrow.", "temporary", True),
                                    ("User uses Bun at work.", "project", False)]
    assert {why: metric("memory_proxy_facts_dropped_total", reason=why) - n for why, n in dropped.items()} == {
        "unsupported": 1, "not_about_user": 1, "not_users_words": 1}


async def test_a_question_restating_an_injected_memory_is_dropped_as_known_not_unsupported(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """Issue 26: "Any ideas near where I live?" made the model hand back what the turn was told; those facts were
    logged as `unsupported`, as if invented."""
    runs = await add_memory(db, USER_A, "User runs 42 km a week.")
    memory_llm.extract = lambda message: ["User runs 42 km a week."]  # a number the user did not say here
    known = metric("memory_proxy_facts_dropped_total", reason="known")
    await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload(  # as the turn wrote it
        "Any ideas for a longer run this week?", retrieved=(Retrieved(runs, "User runs 42 km a week."),)))
    assert await worker.run_until_idle() == 1
    assert metric("memory_proxy_facts_dropped_total", reason="known") == known + 1
    assert await active_texts(db, USER_A) == ["User runs 42 km a week."]


def _said_facts(n: int) -> tuple[str, list[str]]:
    topics = [f"topic{i}" for i in range(n)]
    return "I like " + ", ".join(topics) + ".", [f"User likes {t}." for t in topics]


def _kept(facts: list[str], message: str) -> tuple[list[str], list[str]]:
    from datetime import UTC, datetime

    from memory_proxy.formation.evidence import own_words
    from memory_proxy.formation.extract import ExtractedFact
    from memory_proxy.formation.steps import kept_facts

    texts, dropped = kept_facts([ExtractedFact(fact=f) for f in facts], own_words(message), [], "",
                                datetime.now(UTC))
    return [text for text, _ in texts], [d["why"] for d in dropped]


@pytest.mark.parametrize(("known", "why"), [
    ((), ["unsupported"]),  # 5432: not in the user's words
    (("User's staging database runs on port 5432.",), []),  # said before: the turn's memory holds it
    (("User's flat is number 5432.",), []),  # a memory of the turn: its numbers are the user's, said before
])
def test_an_update_naming_the_old_value_is_grounded_by_the_turns_memories(known: tuple[str, ...],
                                                                          why: list[str]) -> None:
    from memory_proxy.formation.evidence import own_words
    from memory_proxy.formation.extract import ExtractedFact
    from memory_proxy.formation.steps import kept_facts

    fact = ExtractedFact(fact="User's staging database moved from port 5432 to port 5433.", type="project")
    kept, dropped = kept_facts([fact], own_words("staging moved to port 5433 today"), [], "", datetime.now(UTC),
                               known)
    assert [d["why"] for d in dropped] == why and len(kept) == 1 - len(why)


def test_a_fact_the_model_marks_as_a_secret_is_dropped_whatever_it_says() -> None:
    """A secret no rule recognises ("the gate opens with the year we met") is still kept out when the memory LLM
    gives the fact the type "secret"; an ordinary fact of the same turn stays."""
    from datetime import UTC, datetime

    from memory_proxy.formation.evidence import own_words
    from memory_proxy.formation.extract import Extraction
    from memory_proxy.formation.steps import kept_facts

    message = "I live in Lyon and the garden gate opens with the year we met plus seven"
    parsed = Extraction.model_validate_json(
        '{"facts": [{"fact": "User lives in Lyon.", "type": "identity"},'
        ' {"fact": "User\'s garden gate opens with the year they met plus seven.", "type": "Secret"}]}')
    texts, dropped = kept_facts(parsed.facts, own_words(message), [], "", datetime.now(UTC))
    assert [text for text, _ in texts] == ["User lives in Lyon."]
    assert [d["why"] for d in dropped] == ["secret"]


def test_a_fact_over_the_size_limit_is_dropped_not_cut() -> None:
    from memory_proxy.formation.memory_text import MAX_MEMORY_BYTES

    kept, dropped = _kept(["User likes " + "é" * MAX_MEMORY_BYTES, "User likes tea."],
                          "I like tea and " + "é" * MAX_MEMORY_BYTES)
    assert kept == ["User likes tea."]
    assert dropped == ["too_long"]


def test_at_most_the_per_turn_cap_is_kept_and_repeats_are_dropped() -> None:
    from memory_proxy.formation.memory_text import MAX_FACTS_PER_TURN

    message, facts = _said_facts(MAX_FACTS_PER_TURN + 3)
    kept, dropped = _kept([facts[0], facts[0].lower(), *facts[1:]], message)
    assert kept == facts[:MAX_FACTS_PER_TURN]
    assert dropped == ["repeated"] + ["over_cap"] * 3


def test_an_expiring_fact_never_retires_a_lasting_memory_and_the_lasting_fact_takes_the_place() -> None:
    from datetime import UTC, datetime

    from memory_proxy.formation.resolve import Resolution
    from memory_proxy.formation.steps import _settle
    from memory_proxy.records import FactAttributes, Memory
    from memory_proxy.settings import load_settings

    settings = load_settings({}).formation
    now = datetime.now(UTC)
    home = Memory(id="home", content="User lives in Lyon.", created_at=now, memory_type="identity")
    cold = Memory(id="cold", content="User has a cold.", created_at=now, memory_type="temporary")

    def fact(text: str, kind: str, target: str) -> Resolution:
        return Resolution(text, [], "replace", target, "the model: the new fact updates it", FactAttributes(kind))

    moved, lives, week, well = (fact("User moved to Quito last month.", "context", "home"),
                                fact("User lives in Quito.", "identity", "home"),
                                fact("User is in Paris this week.", "temporary", "home"),
                                fact("User's cold is gone.", "temporary", "cold"))
    resolutions = [moved, lives, week, well]
    _settle(resolutions, {"home": home, "cold": cold}, settings)
    assert [(r.action, r.target_id) for r in resolutions] == [
        ("add", None), ("replace", "home"), ("add", None), ("replace", "cold")]


async def test_a_same_the_model_does_not_confirm_for_that_pair_keeps_the_new_fact(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """"same" drops the new fact, so it is checked like a replace: a small model called a cat's age the
    same as the user's city."""
    memory_llm.extract = lambda message: [
        {"fact": "User's cat Pixel is 3.", "same_text": "User lives in Lyon."},
        {"fact": "User speaks Spanish.", "same_text": "User speaks some Spanish."}]
    memory_llm.check = lambda prompt: "New fact: User speaks Spanish." in prompt  # confirms the second only
    await add_memory(db, USER_A, "User lives in Lyon.")
    await add_memory(db, USER_A, "User speaks some Spanish.")
    await client.post(CHAT, json=chat_body("my cat Pixel is 3, and I speak Spanish"), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    assert memory_llm.calls("check") == 2
    assert any('Question: Does the old fact include the new fact?' in p for purpose, p in memory_llm.prompts
               if purpose == "check")
    assert await active_texts(db, USER_A) == ["User lives in Lyon.", "User speaks some Spanish.", "User's cat Pixel is 3."]


async def test_an_update_the_model_does_not_confirm_for_that_pair_keeps_the_old_memory(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = lambda message: [
        {"fact": "User rides a bike to work.", "replaces_text": "User drives to work."},
        {"fact": "User has a cat.", "replaces_text": "User has a dog."}]
    memory_llm.check = lambda prompt: "New fact: User has a cat." in prompt  # confirms the second only
    await add_memory(db, USER_A, "User drives to work.")
    await add_memory(db, USER_A, "User has a dog.")
    await client.post(CHAT, json=chat_body("I ride a bike to work and I have a cat"), headers=user_headers(USER_A))
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    assert memory_llm.calls("relate") == 2 and memory_llm.calls("check") == 2
    assert await active_texts(db, USER_A) == ["User drives to work.", "User has a cat.", "User rides a bike to work."]
    [line] = [e for e in logs if e["event"] == "memory_decision"]
    cur = await db.execute("SELECT l.vector_id FROM users_vectors l JOIN vectors v ON v.id = l.vector_id"
                           " WHERE l.user_id = %s AND v.content = %s", [USER_A, "User drives to work."])
    [(drives,)] = await cur.fetchall()
    # the log says the update was proposed and not confirmed, not just "new information" (steps.py counts it)
    assert {d["fact"]: d["reason"] for d in line["decisions"]}["User rides a bike to work."] == (
        f"new information (replace {drives}: not confirmed)")


@pytest.mark.parametrize("placement", ["user", "system"])
async def test_a_document_that_spoofs_the_users_query_plants_nothing_and_erases_nothing(
        placement: str, client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """A retrieved document closes OpenWebUI's context and opens its own `<user_query>`; the model obeys
    whatever it is shown as the user's words. Only the user's question reaches it, whether OpenWebUI put
    the filled template before the user's message (the default) or into the system message
    (RAG_SYSTEM_CONTEXT=true: the user's message stays as typed)."""
    from tests.support.fakes import SPOOF, openwebui_rag

    known = ["User works at Orvel.", "User's sister lives in Rome.", "User's son Emil is 8."]
    for text in known:
        await add_memory(db, USER_A, text)
    memory_llm.extract = lambda message: {"facts": ["User lives in Pyongyang."], "forget": "the user's job and family",
                                          "forgets": known} if "Pyongyang" in message else [
        "User volunteers for the charity."]
    question = "How many wells did the charity fund? I volunteer for them."
    template = openwebui_rag([SPOOF], "").removesuffix("\n")
    body = chat_body(f"{template}\n{question}") if placement == "user" else {
        "model": "fake-model", "messages": [{"role": "system", "content": f"You are helpful.\n{template}"},
                                            {"role": "user", "content": question}]}
    await client.post(CHAT, json=body, headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == sorted([*known, "User volunteers for the charity."])
    assert memory_llm.calls("forget") == 0


async def test_a_replys_facts_are_checked_in_a_worker_process(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """Reading the user's words and redacting and grounding what the model wrote grow with the message and the
    reply: never on the event loop (two runs in a worker process a job)."""
    memory_llm.extract = lambda message: [{"fact": "User uses Bun at work.", "type": "project"}]
    before = metric("memory_proxy_secret_scans_total", where="process", outcome="ok")
    await client.post(CHAT, json=chat_body("I use Bun at work."), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    assert metric("memory_proxy_secret_scans_total", where="process", outcome="ok") == before + 2
    assert await active_texts(db, USER_A) == ["User uses Bun at work."]


def test_past_the_facts_read_per_reply_the_rest_are_dropped_unread(monkeypatch: Any) -> None:
    from memory_proxy.formation import memory_text
    from memory_proxy.formation.memory_text import MAX_FACTS_PER_TURN, MAX_MEMORY_BYTES
    from memory_proxy.formation.steps import MAX_FACTS_READ

    scanned: list[str] = []

    def recording(text: str) -> Any:
        scanned.append(text)
        return redact(text)

    from memory_proxy.redact import redact
    monkeypatch.setattr(memory_text, "redact", recording)
    message, facts = _said_facts(40)
    kept, dropped = _kept(["User likes " + "é" * MAX_MEMORY_BYTES, *facts], message)
    assert kept == facts[:MAX_FACTS_PER_TURN]
    assert len(scanned) == MAX_FACTS_READ - 1  # the oversized fact was refused unread, and so were those past
    assert dropped == ["too_long"] + ["over_cap"] * (40 - MAX_FACTS_PER_TURN)


# ---------------------------------------------------------------- what `remember` stored in the same turn

LYON = "User lives in Lyon."
CROWD = [BUN, BERLIN, "User prefers green tea over coffee.", "User has a dog named Rex.", "User is allergic to peanuts."]


def placed_near(text: str, others: list[str]) -> Any:
    """The test embedder, with `text` placed among `others` (the mean of their vectors): a fact whose
    nearest memories are those, not the one it repeats."""
    import numpy as np

    mean = np.mean([vector_for(o) for o in others], axis=0)
    near = (mean / np.linalg.norm(mean)).tolist()

    def reply(request: httpx.Request) -> httpx.Response:
        payload = json.loads(request.content)
        inputs = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        data = [{"object": "embedding", "index": i, "embedding": as_requested(
            near if DATE_PREFIX.sub("", t) == text else vector_for(t), payload)} for i, t in enumerate(inputs)]
        return httpx.Response(200, json={"object": "list", "model": payload["model"], "data": data,
                                         "usage": {"prompt_tokens": 3, "total_tokens": 3}})
    return reply


async def remembered_turn(proxy: Any, outside: Any, message: str, fact: str, *, stream: bool = False) -> None:
    """A chat turn in which the scripted chat model calls remember(fact) once, then answers."""
    if stream:
        script_stream(outside, calls_stream((0, "call_1", "remember", [json.dumps({"fact": fact})])))
    else:
        script(outside, calling(call("remember", {"fact": fact})))
    client = await proxy(MEMORY_TOOLS="all")
    response = await client.post(CHAT, json=chat_body(message, stream=stream), headers=user_headers(USER_A))
    assert response.status_code == 200


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
async def test_a_fact_the_chat_model_remembered_is_not_stored_again_by_formation(
        proxy: Any, outside: Any, db: Any, worker: Any, memory_llm: Any, stream: bool) -> None:
    """The memory LLM extracts, in other words, what `remember` stored in the turn, and the user's nearer
    memories would keep the remembered one from its comparison: it is compared all the same, the model's
    `same` holds, and the user keeps one memory of it, not two."""
    for text in CROWD:
        await add_memory(db, USER_A, text)
    paraphrase = "User is based in Lyon."
    outside.routes["embeddings"].side_effect = placed_near(paraphrase, CROWD)
    memory_llm.extract = lambda message: [{"fact": paraphrase, "type": "identity", "same_text": LYON}]
    await remembered_turn(proxy, outside, "I live in Lyon now.", LYON, stream=stream)
    assert await worker.run_until_idle() == 1
    assert memory_llm.calls("relate") == 1
    assert await active_texts(db, USER_A) == sorted([*CROWD, LYON])


@pytest.mark.parametrize("relation", ["replaces_text", "refines_text"])
async def test_formation_never_replaces_or_forgets_what_the_chat_model_remembered(
        proxy: Any, outside: Any, db: Any, worker: Any, memory_llm: Any, relation: str) -> None:
    """A weaker reading of the same words proposes to replace (or refine) the remembered memory and to forget
    it: both are confirmed by the model, and neither is acted on; the decisions say why."""
    memory_llm.extract = lambda message: {"facts": [{"fact": "User lives in Lyon with Anna.", relation: LYON}],
                                          "forget": "Lyon", "forgets": [LYON]}
    await remembered_turn(proxy, outside, "I live in Lyon with Anna.", LYON)
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [LYON]
    [line] = [e for e in logs if e["event"] == "memory_decision"]
    assert [(d["action"], d["fact"], d["reason"].split(";")[0].split(":")[0]) for d in line["decisions"]] == [
        ("ignore", LYON, REMEMBERED), ("ignore", "User lives in Lyon with Anna.", REMEMBERED)]
    cur = await db.execute("SELECT action FROM memory_updates WHERE user_id = %s ORDER BY id", [USER_A])
    assert [row[0] for row in await cur.fetchall()] == ["remember"]
