import re
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import partial
from typing import Any, get_type_hints

import psycopg
import pytest

from memory_proxy.settings import (
    SPECS,
    STORED_TYPES,
    Settings,
    SettingsError,
    declarations,
    env,
    load_settings,
    markdown_table,
)
from tests.support.data import ROOT

CONFIGURATION_PAGE = ROOT / "docs" / "CONFIGURATION.md"


def test_defaults_follow_the_product_contract() -> None:
    settings = load_settings({"MEMORY_PROXY_DATA_DIR": "/tmp/x"})
    assert settings.upstream.base_url == "https://api.mistral.ai/v1"
    assert settings.server.user_id_header == "x-openwebui-user-id"
    assert settings.retrieval.top_k == 10 and settings.retrieval.min_score == 0.8
    assert settings.embedding.provider == "mistral" and settings.embedding.model == "mistral-embed"
    assert settings.database.url is None  # → embedded PostgreSQL
    assert settings.server.api_keys == ()  # → a key is generated, never open


def test_mistral_key_is_the_fallback_for_upstream_and_embeddings() -> None:
    settings = load_settings({"MISTRAL_API_KEY": "mk"})
    assert settings.upstream.api_key == "mk" and settings.embedding.api_key == "mk"
    settings = load_settings({"MISTRAL_API_KEY": "mk", "UPSTREAM_API_KEY": "uk", "EMBEDDING_API_KEY": "ek"})
    assert (settings.upstream.api_key, settings.embedding.api_key) == ("uk", "ek")


def test_openai_embeddings_default_to_the_upstream_url() -> None:
    settings = load_settings({"EMBEDDING_PROVIDER": "openai", "UPSTREAM_BASE_URL": "http://localhost:8081/v1/"})
    assert settings.embedding.base_url == "http://localhost:8081/v1"


def test_every_mistake_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"MEMORY_PROXY_PORT": "http", "RETRIEVAL_MIN_SCORE": "2", "EMBEDDING_PROVIDER": "cohere",
                       "UPSTREAM_BASE_URL": "api.mistral.ai", "PROXY_API_KEYS": "short",
                       "RETRIEVAL_TOP_K": "0", "DATABASE_URL": "mysql://x"})
    message = str(caught.value)
    for name in ("MEMORY_PROXY_PORT", "RETRIEVAL_MIN_SCORE", "EMBEDDING_PROVIDER", "UPSTREAM_BASE_URL",
                 "PROXY_API_KEYS", "RETRIEVAL_TOP_K", "DATABASE_URL"):
        assert name in message
    assert "is not a number" in message and "one of: mistral, openai" in message


def test_the_configuration_page_documents_every_setting() -> None:
    page = CONFIGURATION_PAGE.read_text()
    missing = [spec.name for spec in SPECS if f"`{spec.name}`" not in page]
    assert not missing, f"settings missing from docs/CONFIGURATION.md's table: {missing}"
    assert markdown_table() in page, "docs/CONFIGURATION.md's table is stale: paste `memory-proxy settings` output"


def test_json_mode_is_refused_for_mistral() -> None:
    with pytest.raises(SettingsError, match="MEMORY_LLM_MODE='json'"):
        load_settings({"MEMORY_LLM_MODE": "json", "MISTRAL_API_KEY": "mk"})
    assert load_settings({"MEMORY_LLM_MODE": "json", "MEMORY_LLM_PROVIDER": "openai"}).memory_llm.mode == "json"


def test_with_no_memory_llm_configured_formation_uses_the_upstream() -> None:
    local = load_settings({"UPSTREAM_BASE_URL": "http://127.0.0.1:8081/v1", "UPSTREAM_API_KEY": "uk"}).memory_llm
    assert (local.provider, local.base_url, local.api_key, local.mode) == (
        "upstream", "http://127.0.0.1:8081/v1", "uk", "json")
    assert local.model == "mistral-small-latest"  # only for a job that names no model (formation/memory_llm.for_turn)
    for base_url in ("http://ollama:11434/v1", "http://192.168.1.20:8080/v1", "http://gpu-box.local/v1"):
        assert load_settings({"UPSTREAM_BASE_URL": base_url}).memory_llm.mode == "json"
    hosted = load_settings({"UPSTREAM_BASE_URL": "https://api.openai.com/v1", "UPSTREAM_API_KEY": "sk"}).memory_llm
    assert (hosted.provider, hosted.base_url, hosted.api_key, hosted.mode) == (
        "upstream", "https://api.openai.com/v1", "sk", "tools")


def test_a_configured_memory_llm_wins_over_the_upstream() -> None:
    upstream = {"UPSTREAM_BASE_URL": "http://127.0.0.1:8081/v1", "UPSTREAM_API_KEY": "uk"}
    for own in ({"MISTRAL_API_KEY": "mk"}, {"MEMORY_LLM_MODEL": "mistral-medium-latest"},
                {"MEMORY_LLM_API_KEY": "lk"}, {"MEMORY_LLM_BASE_URL": "https://llm.example.test/v1"}):
        llm = load_settings({**upstream, **own}).memory_llm
        assert (llm.provider, llm.mode) == ("mistral", "tools"), own  # as before: Mistral's API, its defaults
    llm = load_settings({**upstream, "MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_MODEL": "qwen"}).memory_llm
    assert (llm.provider, llm.base_url, llm.model, llm.mode) == ("openai", "http://127.0.0.1:8081/v1", "qwen", "tools")
    assert load_settings({**upstream, "MEMORY_LLM_MODE": "md_json"}).memory_llm.mode == "md_json"


def test_the_upstream_provider_sends_the_upstreams_key_not_a_mistral_one() -> None:
    """A Mistral key for the embeddings beside a chat upstream of another vendor: formation, asked to use the
    upstream, authenticates there with the upstream's key."""
    chosen = {"MEMORY_LLM_PROVIDER": "upstream", "MISTRAL_API_KEY": "mk", "UPSTREAM_API_KEY": "uk",
              "UPSTREAM_BASE_URL": "https://api.openai.com/v1"}
    assert load_settings(chosen).memory_llm.api_key == "uk"
    assert load_settings({**chosen, "MEMORY_LLM_API_KEY": "lk"}).memory_llm.api_key == "lk"


# Values that parse for some variable; each variable must accept one of them that changes a setting.
SAMPLES = ("2", "3", "review", "0.5", "false", "true", "openai", "text", "json_schema", "debug", "console", "raw", "search", "threshold",
           "k" * 40, "header",
           "http://example.test/v1", "postgresql://example.test/db",
           "identity=1,preference=2,relationship=3,project=4,context=5,temporary=6", "rpm=60,concurrent=2")
# A variable some of whose values need another one set: that one, beside it.
WITH = {"TEAM_MIRROR": {"USER_GROUPS_HEADER": "x-groups"}}


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_every_declared_variable_changes_a_setting(spec: Any) -> None:
    """A variable that is declared (and documented) but never reaches an attribute fails here."""
    default = load_settings(WITH.get(spec.name, {}))
    for sample in SAMPLES:
        try:
            if load_settings({**WITH.get(spec.name, {}), spec.name: sample}) != default:
                return
        except SettingsError:
            continue
    pytest.fail(f"{spec.name} is declared, but no value of it changes the settings")


@dataclass(frozen=True)
class _FieldWithoutVariable:
    port: int = env("EXAMPLE_PORT", "8080", "A port.", int)
    host: str = "127.0.0.1"  # filled by no variable


@dataclass(frozen=True)
class _VariableDeclaredTwice:
    port: int = env("EXAMPLE_PORT", "8080", "A port.", int)
    other_port: int = env("EXAMPLE_PORT", "8081", "The same variable, declared again.", int)


def test_a_field_without_a_variable_or_a_variable_declared_twice_fails() -> None:
    """`memory_proxy.settings` runs the same check on `Settings` at import."""
    with pytest.raises(TypeError, match=r"_FieldWithoutVariable\.host: no environment variable"):
        declarations(_FieldWithoutVariable)
    with pytest.raises(TypeError, match="declared more than once: EXAMPLE_PORT"):
        declarations(_VariableDeclaredTwice)
    by_field, specs = declarations(Settings)
    assert specs == SPECS and by_field["server.port"].name == "MEMORY_PROXY_PORT"


def test_defaults_in_code_are_the_declared_ones() -> None:
    """A section built in code (RankingSettings(), MaintenanceSettings(), …) equals the one loaded from an
    empty environment."""
    def sections(node: Any) -> list[Any]:
        nested = [getattr(node, f.name) for f in fields(node) if is_dataclass(getattr(node, f.name))]
        return [node, *(section for child in nested for section in sections(child))]

    for section in sections(load_settings({})):
        required = {f.name: getattr(section, f.name) for f in fields(section)
                    if f.default is MISSING and f.default_factory is MISSING}
        assert type(section)(**required) == section, type(section).__name__


def test_a_default_is_declared_only_by_its_variable() -> None:
    """No field holds a default of its own: a section built in code takes what an empty environment gives,
    so a default written twice cannot drift from the declared one."""
    def section_fields(cls: type) -> list[Any]:
        hints = get_type_hints(cls)
        return [f for field in fields(cls) for f in (section_fields(hints[field.name])
                if is_dataclass(hints[field.name]) else [field])]

    own = [f.name for f in section_fields(Settings) if f.default is not MISSING
           or (f.default_factory is not MISSING and not isinstance(f.default_factory, partial))]
    assert not own, f"fields with a default besides their env() declaration: {own}"


def test_a_lifetime_written_before_episodes_still_reads_and_episodes_keep_their_default() -> None:
    written = "identity=never,preference=never,relationship=never,project=never,context=10,temporary=2"
    settings = load_settings({"MEMORY_TTL_DAYS": written, "MEMORY_HALF_LIFE_DAYS": written + ",episode=30"})
    assert settings.formation.ttl_days["context"] == 10 and settings.formation.ttl_days["episode"] == 365
    assert settings.retrieval.ranking.half_life_days["episode"] == 30
    with pytest.raises(SettingsError, match="missing types: temporary"):
        load_settings({"MEMORY_TTL_DAYS": "identity=never,preference=never,relationship=never,project=never,"
                                          "context=10,episode=5"})


def test_the_database_allows_exactly_the_memory_types(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        checks = conn.execute("SELECT pg_get_constraintdef(oid) AS check FROM pg_constraint "
                              "WHERE contype = 'c' AND conrelid = 'vectors'::regclass").fetchall()
    [check] = [check for (check,) in checks if "memory_type" in check]
    assert sorted(re.findall(r"'([^']*)'::text", check)) == sorted(STORED_TYPES), check


@pytest.mark.parametrize("value, problem", [("rpm=0", "positive whole number"), ("rpm=5,rpm=6", "given twice"),
                                            ("rps=5", "unknown limit 'rps'"), ("tpm=lots", "is not a number")])
def test_a_limit_that_is_not_a_positive_whole_number_of_a_known_kind_is_refused(value: str, problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        load_settings({"LIMITS_PER_USER": value})
    assert load_settings({"LIMITS_PER_MODEL": " rpm=5 , daily_tokens=100 "}).limits.model == {"rpm": 5, "daily_tokens": 100}
