"""What a new fact does to the user's memories, by rule, whatever the model said (memory/resolve.py)."""

from datetime import UTC, datetime

import pytest

from proxy.memory.evidence import own_words
from proxy.memory.resolve import decide, same_frame
from proxy.schemas import Memory


def memories(*texts: str) -> list[Memory]:
    return [Memory(id=f"m{i}", content=text, created_at=datetime.now(UTC)) for i, text in enumerate(texts, 1)]


@pytest.mark.parametrize(("fact", "known", "replaces", "said", "action", "target"), [
    # 1. redundant: nothing new
    ("User lives in Oslo.", ["User lives in Oslo."], 0, "I live in Oslo.", "ignore", "User lives in Oslo."),
    ("User plays the violin.", ["User plays the violin in an orchestra."], 0, "I play the violin.",
     "ignore", "User plays the violin in an orchestra."),
    # 2. the model's pointer, when the two are related…
    ("User is moving to Boulder next month.", ["User is moving to Denver next month."], 1, "It's Boulder.",
     "replace", "User is moving to Denver next month."),
    ("User has a beagle named Max.", ["User has a dog."], 1, "My dog is a beagle called Max.",
     "replace", "User has a dog."),
    ("User is a backend developer at Spotify.", ["User works in tech."], 1,
     "To be more precise about my job: I'm a backend developer at Spotify.", "replace", "User works in tech."),
    ("User switched to a Pixel 8.", ["User uses an iPhone 12."], 1, "I switched to a Pixel 8.",
     "replace", "User uses an iPhone 12."),
    # … and never when they are not (a wrong number, an unknown one, infinity mapped to 0 upstream)
    ("User has a cat.", ["User lives in Berlin."], 1, "I have a cat.", "add", None),
    ("User has a cat.", ["User lives in Berlin."], 42, "I have a cat.", "add", None),
    # 3. richer: the new fact holds everything the memory said, and more
    ("User lives in Oslo near Frogner park.", ["User lives in Oslo."], 0, "I live in Oslo near Frogner park.",
     "refine", "User lives in Oslo."),
    ("User's dog is a beagle named Max.", ["User has a dog."], 0, "My dog is a beagle called Max.",
     "refine", "User has a dog."),
    ("User's brother lives in Paris.", ["User lives in Paris."], 0, "My brother lives in Paris.", "add", None),
    # 4, 5. a new home; a change the user announces, with no pointer from the model
    ("User uses Node for JavaScript projects.", ["User is an engineer who uses Bun for JavaScript projects."], 0,
     "I switched from Bun to Node.", "replace", "User is an engineer who uses Bun for JavaScript projects."),
    ("User lives in Montreal.", ["User lives in Lyon."], 0, "I moved to Montreal last month.",
     "replace", "User lives in Lyon."),
    ("User only drinks green tea and no longer drinks coffee.", ["User drinks coffee every morning."], 0,
     "I quit coffee, now I only drink green tea.", "replace", "User drinks coffee every morning."),
    ("User prefers tabs for indentation.", ["User prefers spaces for indentation."], 0,
     "Ugh, I'm back to tabs for indentation.", "replace", "User prefers spaces for indentation."),
    ("User moved from Lyon to Montreal.", ["User lives in Lyon."], 0, "I moved from Lyon to Montreal.",
     "replace", "User lives in Lyon."),
    ("User moved to Montreal last month.", ["User lives in Lyon."], 0, "I moved to Montreal last month.",
     "replace", "User lives in Lyon."),
    ("User's sister lives in Lima.", ["User's sister lives in Quito."], 0, "My sister lives in Lima.",
     "replace", "User's sister lives in Quito."),
    ("User lives in Lima.", ["User's sister lives in Quito."], 0, "I live in Lima.", "add", None),
    ("User switched to spaces, tabs kept causing messy diffs.", ["User prefers tabs for indentation."], 0,
     "I switched to spaces, tabs kept causing messy diffs.", "replace", "User prefers tabs for indentation."),
    # 6. new, and two facts that can both be true
    ("User stopped playing piano.", ["User plays guitar."], 0, "I stopped playing piano.", "add", None),
    ("User likes cooking.", ["User likes hiking."], 0, "I like cooking.", "add", None),
    ("User likes cooking.", ["User likes hiking."], 0, "I like cooking now too.", "add", None),
])
def test_the_decision_for_a_new_fact(fact: str, known: list[str], replaces: int, said: str, action: str,
                                     target: str | None) -> None:
    chosen, memory, why = decide(fact, known=memories(*known), neighbors=[], replaces=replaces,
                                 said=own_words(said))
    assert (chosen, memory.content if memory else None) == (action, target), why


def test_neighbours_count_as_well_as_the_listed_facts() -> None:
    [old] = memories("User lives in Lyon.")
    action, memory, _ = decide("User lives in Montreal.", known=[], neighbors=[old], replaces=0,
                               said=own_words("I moved to Montreal."))
    assert (action, memory) == ("replace", old)


@pytest.mark.parametrize(("a", "b", "same"), [
    ("User lives in Lyon.", "User lives in Montreal.", True),
    ("User works as a teacher.", "User works as a UX designer at a startup.", True),
    ("User's favourite colour is blue.", "User's favourite colour is green.", True),
    ("User likes hiking.", "User likes cooking.", False),  # one shared word besides "User": both can be true
    ("User lives in Lyon.", "User lives in Lyon.", False),  # nothing differs
])
def test_the_same_sentence_with_another_value(a: str, b: str, same: bool) -> None:
    assert same_frame(a, b) is same
