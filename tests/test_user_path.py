"""A user's path through the real CLI and dispatcher (issue 19): what the plugin asks, prints and
writes must work when followed as it is."""

from __future__ import annotations

import pytest
from harness import enable_plugin, run_hermes, session_ids
from models import minilm_model_dir


@pytest.fixture
def user(world):
    """A home with the plugin enabled as a user enables it, and one git project with history."""
    enable_plugin(world.home)
    world.repo = world.git_repo("shop")
    world.old = world.session(world.repo, [("user", "My car broke down on the motorway and was towed")])
    world.now = world.session(world.repo)
    return world


def _config(world) -> bytes:
    return (world.home / "config.yaml").read_bytes()


def _local_setup(world) -> None:
    from hermes_cli.config import save_config

    local = {"provider": "local", "model": "all-MiniLM-L6-v2", "model_path": str(minilm_model_dir())}
    save_config({"plugins": {"project-history-recall": {"embedding": local}}}, merge_existing=True)


@pytest.mark.parametrize(
    ("provider", "env", "says"),
    [
        ("openai", {"PROJECT_HISTORY_EMBEDDING_API_KEY": "sk-placeholder"}, "did not embed"),
        ("ollama", {}, "is Ollama running?"),
    ],
)
def test_a_setup_that_fails_leaves_a_working_configuration_as_it_was(user, provider, env, says):
    _local_setup(user)
    allowed = run_hermes(user.home, "project-history", "allow", "--yes", "--all-projects", cwd=user.repo)
    assert allowed.returncode == 0, allowed.stderr
    before = _config(user)
    failed = run_hermes(user.home, "project-history", "setup", provider, "--yes", cwd=user.repo, **env)
    assert failed.returncode != 0
    (line,) = failed.stderr.strip().splitlines()
    assert says in line and "config.yaml is unchanged" in line, line
    assert _config(user) == before
    result = user.search(user.now, "vehicle breakdown", mode="semantic")
    assert result["semantic_status"] == "ready" and session_ids(result) == [user.old]


def test_openai_without_a_key_writes_nothing_and_says_where_the_key_goes(user):
    before = _config(user)
    done = run_hermes(user.home, "project-history", "setup", "openai", "--yes", cwd=user.repo)
    assert done.returncode == 1 and "PROJECT_HISTORY_EMBEDDING_API_KEY" in done.stdout
    assert _config(user) == before


def test_before_setup_the_question_offers_the_local_model(user):
    ask = user.search(user.now, "vehicle breakdown", mode="hybrid")["semantic_consent"]
    assert ask["provider"] == "local" and "nothing leaves the machine" in ask["ask_user"]
    assert "setup local --yes --allow" in ask["on_yes_run"]
    (remote,) = ask["alternatives"]
    assert remote["provider"] == "openai" and "setup openai --yes --allow" in remote["on_yes_run"]
    # Once a provider is chosen, the question is about that one.
    _local_setup(user)
    chosen = user.search(user.now, "vehicle breakdown", mode="hybrid")["semantic_consent"]
    assert chosen["provider"] == "local" and "alternatives" not in chosen
    assert " allow --project " in chosen["on_yes_run"]


def test_a_conversation_moves_to_a_repository_project_as_search_names_it(user):
    blog = user.git_repo("blog")
    post = user.session(blog, [("user", "the blog comments use PostgreSQL")])
    shown = user.search(user.session(blog), "PostgreSQL")["project"]
    assert shown == {"kind": "auto", "key": blog}
    moved = user.move(user.now, f"repo:{shown['key']}")
    assert moved["success"] is True, moved
    assert moved["cwd"] == blog and moved["project"] == shown
    assert user.row(user.now)["cwd"] == blog
    assert session_ids(user.search(user.now, "PostgreSQL")) == [post]
    missing = user.move(user.now, "repo:/nowhere/at/all")
    assert missing["success"] is False and missing["error"].startswith("project not found")


def test_counts_and_words_of_status_search_and_index(user):
    _local_setup(user)
    assert (
        run_hermes(user.home, "project-history", "allow", "--yes", "--all-projects", cwd=user.repo).returncode
        == 0
    )
    index = run_hermes(user.home, "project-history", "index", "--all-projects", cwd=user.repo)
    assert index.returncode == 0, index.stderr
    assert "embedded on this machine" in index.stdout and "sent to" not in index.stdout
    again = run_hermes(user.home, "project-history", "index", "--all-projects", cwd=user.repo)
    assert "already up to date, nothing to embed" in again.stdout
    status = run_hermes(user.home, "project-history", "status", cwd=user.repo)
    assert ": 2 conversations, 1 message, " in status.stdout, status.stdout
    search = run_hermes(user.home, "project-history", "search", "car", "--mode", "keyword", cwd=user.repo)
    assert "·  2 conversations  ·" in search.stdout, search.stdout
