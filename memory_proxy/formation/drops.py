"""Why a fact the memory LLM returned is not stored: one closed set of reasons, the `why` of each `dropped` entry of
the `memory_decision` log line and the `reason` label of memory_proxy_facts_dropped_total.

A fact written about one of the user's teams passes the same guards, about the team instead of the user; refused,
it is counted under the reason's team form (`Drop.SECRET.for_team()` is `team_secret`), so that a team's losses
read apart from the user's own.
"""

from __future__ import annotations

from enum import StrEnum


class Drop(StrEnum):
    NOT_ABOUT_USER = "not_about_user"  # its subject is not the user
    NOT_ABOUT_TEAM = "not_about_team"  # written about a team, its subject is not the team
    EMPTY = "empty"  # no word after its subject ("User.")
    TOO_LONG = "too_long"  # over the memory size limit
    NOT_ONE_FACT = "not_one_fact"  # a paraphrased passage
    SECRET = "secret"  # it held a secret (redacted, it is worth nothing)
    REPEATED = "repeated"  # the same text as a fact kept before it in the reply
    OVER_CAP = "over_cap"  # past the facts a turn may store, or past those read of one reply
    KNOWN = "known"  # it only restates a memory injected into the turn
    UNSUPPORTED = "unsupported"  # a name or number in none of the user's words: invented
    NOT_USERS_WORDS = "not_users_words"  # a name or number from text that is not the user's (a document, a reply)
    USER_CAP = "user_cap"  # its holder already holds MAX_MEMORIES_PER_USER active memories
    TEAM_UNKNOWN = "team_unknown"  # written about a team that is none of the user's
    TEAM_UNSTATED = "team_unstated"  # the model did not confirm the user's message states it of the team
    TEAM_NOT_ABOUT_TEAM = "team_not_about_team"
    TEAM_EMPTY = "team_empty"
    TEAM_TOO_LONG = "team_too_long"
    TEAM_NOT_ONE_FACT = "team_not_one_fact"
    TEAM_SECRET = "team_secret"
    TEAM_REPEATED = "team_repeated"
    TEAM_OVER_CAP = "team_over_cap"
    TEAM_KNOWN = "team_known"
    TEAM_UNSUPPORTED = "team_unsupported"
    TEAM_NOT_USERS_WORDS = "team_not_users_words"

    @property
    def about_team(self) -> bool:
        """Whether the fact was written about a team."""
        return self.value.startswith("team_")

    def for_team(self) -> Drop:
        """This guard's reason for a fact written about a team."""
        return self if self.about_team else Drop("team_" + self.value)
