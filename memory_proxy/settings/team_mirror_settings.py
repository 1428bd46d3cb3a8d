"""Where a user's teams may come from besides an operator (TEAM_MIRROR, docs/TEAMS.md#teams-from-openwebuis-groups):
nowhere (`off`), OpenWebUI's own API read server to server with an operator's key (`openwebui`, recommended), or a
request header any holder of a proxy key can set (`header`)."""

from __future__ import annotations

from dataclasses import dataclass

from .declaration import choice, env, header_name, positive_float, positive_int, url


@dataclass(frozen=True)
class TeamMirrorSettings:
    mode: str = env("TEAM_MIRROR", "off", "Mirror OpenWebUI's groups as teams: `off` (teams are made by operators "
        "only), `openwebui` (each user's groups read from OpenWebUI's API with `OPENWEBUI_API_KEY`, server to "
        "server, at most every `TEAM_MIRROR_REFRESH_SECONDS`: the recommended mode), or `header` (the groups a "
        "request's `USER_GROUPS_HEADER` names: unsigned, so whoever holds a proxy key can join any mirrored team "
        "by naming it; for a proxy only OpenWebUI can reach). Either way the mirror makes a team per group "
        "(at most `TEAM_MIRROR_MAX_TEAMS`) and never joins or changes an operator's team.",
        choice("off", "openwebui", "header"), in_code=True)
    openwebui_url: str = env("OPENWEBUI_URL", "", "OpenWebUI's base URL for `TEAM_MIRROR=openwebui`, as the proxy "
        "reaches it (e.g. `http://open-webui:8080`).", url, unset=lambda _: "", in_code=True)
    openwebui_api_key: str = env("OPENWEBUI_API_KEY", "", "An OpenWebUI admin's API key (`sk-…`, with API keys "
        "enabled in OpenWebUI) for `TEAM_MIRROR=openwebui`: it reads each user's groups "
        "(`GET /api/v1/users/{id}/groups`).", unset=lambda _: "", in_code=True, repr=False)
    groups_header: str = env("USER_GROUPS_HEADER", "", "With `TEAM_MIRROR=header`: the request header that carries "
        "the user's OpenWebUI group ids, comma-separated; set it in OpenWebUI's connection headers as "
        "`{\"X-OpenWebUI-User-Group-Ids\": \"{{USER_GROUP_IDS}}\"}` and name it here.", header_name,
        unset=lambda _: "", in_code=True)
    max_teams: int = env("TEAM_MIRROR_MAX_TEAMS", "1000", "Most teams the mirror makes in all; a group past it is "
        "not mirrored (counted, logged).", positive_int, in_code=True)
    refresh_s: float = env("TEAM_MIRROR_REFRESH_SECONDS", "60", "With `openwebui`: how long a user's groups, once "
        "read, stand before they are read again (in the background: a turn never waits for OpenWebUI).",
        positive_float, in_code=True)
