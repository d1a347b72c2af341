"""config_schema.py: the settings in effect (spec §五), every bad value reported with its key,
and the one settings table, README's."""

from __future__ import annotations

from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def cs(phr):
    return phr.config_schema


def test_defaults_are_the_specs_where_it_names_them(cs):
    settings = cs.parse_settings()
    e = settings.embedding
    assert (e.provider, e.model, e.base_url, e.enabled) == ("openai", "text-embedding-3-small", "", False)
    assert (e.chunk_size, e.chunk_overlap) == (512, 64)  # spec §五's starting values
    assert settings.problems == ()


def test_entries_settings_win_over_the_specs_section_and_spellings_are_coerced(cs):
    spec = {"embedding": {"provider": "local", "chunk_size": "256", "enabled": "yes"}}
    entries = {"embedding": {"chunk_size": 128, "keyword_weight": "2"}}
    e = cs.parse_settings(spec, entries).embedding
    assert (e.provider, e.chunk_size, e.enabled, e.keyword_weight) == ("local", 128, True, 2.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("chunk_size", 8),
        ("chunk_size", 2.5),
        ("top_k", "many"),
        ("enabled", "perhaps"),
        ("base_url", "ftp://x"),
        ("relevance_floor", 2),
        ("timeout_seconds", 0),
        ("batch_size", True),
        ("model", "  "),
    ],
)
def test_a_bad_value_keeps_the_default_and_says_which_key(cs, key, value):
    settings = cs.parse_settings({"embedding": {key: value}})
    assert getattr(settings.embedding, key) == getattr(cs.EmbeddingSettings(), key)
    (problem,) = settings.problems
    assert f"embedding.{key} = {value!r} is invalid: expected" in problem


def test_an_unknown_provider_never_falls_back_to_a_hosted_one(cs):
    settings = cs.parse_settings({"embedding": {"provider": "cohere"}})
    assert settings.embedding.provider == "cohere"
    assert "semantic search is unavailable until it is fixed" in settings.problems[0]


def test_unknown_keys_and_sections_of_the_wrong_type_are_reported(cs):
    assert cs.parse_settings({"embedding": {"colour": "red"}}).problems == (
        "plugins.project-history-recall.embedding.colour is not a known setting; ignored",
    )
    assert cs.parse_settings(["not", "a", "mapping"]).problems == (
        "plugins.project-history-recall must be a mapping; ignored",
    )


def test_overlap_must_be_smaller_than_the_chunk(cs):
    settings = cs.parse_settings({"embedding": {"chunk_size": 64, "chunk_overlap": 64}})
    assert settings.embedding.chunk_overlap == 8
    assert "must be smaller than" in settings.problems[0]


def test_every_setting_has_a_rule_and_a_line_in_the_table(cs):
    names = [f.name for f in cs.fields(cs.EmbeddingSettings)]
    assert sorted(names) == sorted(cs._RULES)
    assert all(cs.EmbeddingSettings.__dataclass_fields__[n].metadata.get("doc") for n in names)


def test_the_readme_shows_the_settings_table_as_config_schema_declares_it(cs):
    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- settings table:")
    start = text.index("\n", start) + 1
    end = text.index("<!-- end of settings table -->")
    assert text[start:end].strip() == cs.settings_table()


def test_endpoints_are_shown_without_their_secrets(cs):
    e = cs.EmbeddingSettings(base_url="http://user:pw@host:8080/v1/?api-key=s3cret")
    assert cs.endpoint_of(e) == "http://host:8080/v1/"
    assert cs.endpoint_secret(e) and cs.endpoint_secret(cs.EmbeddingSettings(base_url="http://h/v1")) == ""
    assert cs.endpoint_of(cs.EmbeddingSettings(provider="voyage")) == "https://api.voyageai.com/v1"


def test_the_first_sentence_of_each_tool_says_when_within_what_hermes_020_shows(phr):
    """Hermes 0.20 offers plugin tools through a deferred catalog that shows each description's
    first sentence, cut at 60 characters (tools/tool_search.py ``_short_desc``)."""
    import re

    handlers = phr.handlers
    for schema in (handlers.SEARCH_SCHEMA, handlers.MOVE_SCHEMA):
        first = re.split(r"[.!?\n]", schema["description"], maxsplit=1)[0]
        assert len(first) <= 60, first
    search_first = re.split(r"[.!?\n]", handlers.SEARCH_SCHEMA["description"], maxsplit=1)[0]
    assert search_first.startswith("Use when") and "project" in search_first
