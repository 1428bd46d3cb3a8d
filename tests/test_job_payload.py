"""The formation job's payload record (memory_proxy/job_payload.py): the current version round-trips, and every
earlier version a queue, a spool file or a dead job may still hold is read."""

import pytest

from memory_proxy.job_payload import VERSION, FormationPayload, Message, Remembered, Retrieved
from tests.support.data import OLD_CONTEXT, OLD_PAYLOAD


def test_the_old_flattened_payload_reads_as_structured_messages() -> None:
    payload = FormationPayload.from_json(OLD_PAYLOAD)
    assert payload == FormationPayload("I'm a software engineer and I use Bun", OLD_CONTEXT,
                                       (Retrieved("v-1", "User lives in Lyon."),), "Nice, Bun is fast.")
    assert payload.earlier("assistant") == [OLD_CONTEXT[1].content]
    assert [m.line() for m in payload.context] == OLD_PAYLOAD["context"]  # the same text, read either way


def test_the_current_version_round_trips_with_a_colon_in_the_text() -> None:
    payload = FormationPayload("note: I use Bun", (Message("user", "assistant: is a word too"),),
                               assistant_reply="ok")
    written = payload.to_json()
    assert written["version"] == VERSION and written["context"] == [{"role": "user",
                                                                     "content": "assistant: is a word too"}]
    assert FormationPayload.from_json(written) == payload


def test_what_remember_stored_and_the_turns_model_round_trip() -> None:
    payload = FormationPayload("I live in Lyon", remembered=(Remembered("v-9", "User lives in Lyon."),),
                               model="qwen2.5-7b-instruct", assistant_reply="Noted.")
    written = payload.to_json()
    assert written["remembered"] == [{"id": "v-9", "content": "User lives in Lyon."}]
    assert written["model"] == "qwen2.5-7b-instruct" and VERSION >= 3
    assert FormationPayload.from_json(written) == payload


# A job as version 2 wrote it, copied from memory_jobs: no `remembered`, no `model`.
V2_PAYLOAD = {"version": 2, "user_message": "I use Bun", "context": [{"role": "assistant", "content": "Which one?"}],
              "retrieved": [{"id": "v-1", "content": "User lives in Lyon."}], "assistant_reply": "Nice."}


def test_a_version_2_payload_is_still_read() -> None:
    payload = FormationPayload.from_json(V2_PAYLOAD)
    assert payload == FormationPayload("I use Bun", (Message("assistant", "Which one?"),),
                                       (Retrieved("v-1", "User lives in Lyon."),), "Nice.")
    assert payload.remembered == () and payload.model == ""


def test_a_done_jobs_emptied_payload_reads_as_empty() -> None:
    assert FormationPayload.from_json({}) == FormationPayload("")


@pytest.mark.parametrize("raw", [{"version": VERSION + 1, "user_message": "x"}, ["user: x"],
                                 {"version": 2, "context": ["user: x"]}])
def test_a_payload_this_code_cannot_read_is_refused(raw: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        FormationPayload.from_json(raw)
