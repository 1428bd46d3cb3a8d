from pathlib import Path

import pytest

from proxy.settings import SPECS, SettingsError, load_settings, markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"


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


def test_readme_documents_every_setting() -> None:
    readme = README.read_text()
    missing = [spec.name for spec in SPECS if f"`{spec.name}`" not in readme]
    assert not missing, f"settings missing from README's configuration table: {missing}"
    assert markdown_table() in readme, "README table is stale: paste `memory-proxy settings` output"


def test_json_mode_is_refused_for_mistral() -> None:
    with pytest.raises(SettingsError, match="MEMORY_LLM_MODE='json'"):
        load_settings({"MEMORY_LLM_MODE": "json"})
    assert load_settings({"MEMORY_LLM_MODE": "json", "MEMORY_LLM_PROVIDER": "openai"}).memory_llm.mode == "json"
