"""Issue 31 (locks and smaller findings): a locked state.db costs the keyword deadline, not a
failure; session ids cleaned for the terminal; lock files never follow a symlink; ``osprey:*``;
two attribution edges (a folder name ending in a space, a since-deleted subfolder of a repo)."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import pytest
from harness import session_ids


def use_rollback_journal(world) -> None:
    """state.db in the rollback journal Hermes falls back to where WAL is refused (a network
    filesystem): there ``BEGIN EXCLUSIVE`` alone keeps every reader out."""
    world.db.close()  # no other connection may be open while the journal mode changes
    conn = sqlite3.connect(world.home / "state.db", isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    finally:
        conn.close()


@contextlib.contextmanager
def exclusive_lock(world, journal: str):
    """Another connection holding state.db under an exclusive lock, taken through SQLite itself:
    ``BEGIN EXCLUSIVE`` (``delete``: the rollback journal, :func:`use_rollback_journal`), or in WAL
    ``locking_mode = EXCLUSIVE`` and a write (``wal``: a backup or maintenance tool). Either way
    no reader can read until it ends."""
    world.db.close()  # Hermes's own connection would hold its shared lock
    holder = sqlite3.connect(world.home / "state.db", isolation_level=None)
    try:
        if journal == "wal":
            holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        if journal == "wal":
            holder.execute("UPDATE sessions SET title = title")
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize(
    ("journal", "warm"),
    [("delete", False), ("delete", True), ("wal", False)],
    ids=["rollback-journal", "rollback-journal-after-a-search", "wal-exclusive-mode"],
)
@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_search_under_an_exclusive_state_db_lock_answers_busy_in_time(world, journal, warm, mode):
    folder = world.folder("ledger")
    world.project("Ledger", folder)
    earlier = world.session(folder, [("user", "The quokkaflux ledger migration runs in two batches")])
    current = world.session(folder, [("user", "hi")])
    if journal == "delete":
        use_rollback_journal(world)
    if warm:  # the process remembers the schema and the scope, and keeps its idle connections
        assert session_ids(world.search(current, "quokkaflux", mode=mode)) == [earlier]

    with exclusive_lock(world, journal):
        started = time.monotonic()
        answer = world.search(current, "quokkaflux", mode=mode)
        elapsed = time.monotonic() - started
    # The acceptance bound of issue 31, the one timing assertion here: the keyword deadline
    # (search.KEYWORD_SECONDS, 3 s from the call's start) plus 1 s.
    assert elapsed < 4.0, (elapsed, answer)
    assert answer["success"] is True, answer
    assert answer["results"] == [], answer
    said = " ".join([answer.get("message", ""), *answer.get("warnings", [])])
    assert "busy" in said and "try again" in said, answer
    assert "Traceback" not in str(answer), answer
    # Once the lock is gone, the same search finds the message again.
    assert session_ids(world.search(current, "quokkaflux", mode=mode)) == [earlier]


# --------------------------------------------------------------------------- a trailing ":*"


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize("query", ["osprey:*", "osprey:", "osprey*", "ospr:*"])
def test_a_trailing_colon_star_is_a_prefix_search(world, query, mode):
    folder = world.folder("birds")
    world.project("Birds", folder)
    earlier = world.session(folder, [("user", "Does the nest camera stream to the lobby screen?")])
    # The one mention is in a reply that also called a tool: its match is checked word by word
    # against its text (the FTS row holds the tool call too).
    calls = [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]
    world.db.append_message(earlier, "assistant", "Osprey camera: stream checked", tool_calls=calls)
    world.session(folder, [("user", "The heron feeder needs new batteries")])
    current = world.session(folder, [("user", "hi")])
    answer = world.search(current, query, mode=mode)
    assert answer["success"] is True, answer
    assert session_ids(answer) == [earlier], answer


# --------------------------------------------------------------------------- session ids in the terminal

HOSTILE_ID = "s_\x1b]8;;http://x\x07click\x1b]8;;\x07_\u202eevil_\x1b[2J"


def test_the_terminal_search_cleans_session_ids_as_it_cleans_titles(world):
    from harness import enable_plugin, run_hermes

    enable_plugin(world.home)
    repo = world.git_repo("app")
    world.db.create_session(HOSTILE_ID, "cli", cwd=repo)  # any string is an id to Hermes's SessionDB
    world.add(HOSTILE_ID, [("user", "the wombat rollout")])
    world.session(repo)
    done = run_hermes(world.home, "project-history", "search", "wombat", "--mode", "keyword", cwd=repo)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "@session:" in line]
    for bad in ("\x1b", "\x07", "\u202e"):
        assert bad not in done.stdout, (bad, done.stdout)
    assert "@session:s_ ]8;;http://x click" in line, line


# --------------------------------------------------------------------------- lock files and symlinks


def plant_link(world, name: str):
    """A symbolic link at the plugin's lock file ``name``, pointing to a file outside its folder
    (that does not exist yet)."""
    data = world.home / "plugins" / "project-history-recall"
    data.mkdir(parents=True, exist_ok=True)
    outside = world.root / "outside" / f"{name}.target"
    outside.parent.mkdir(parents=True, exist_ok=True)
    (data / name).symlink_to(outside)
    return outside


def test_allow_refuses_a_consent_lock_that_is_a_symlink(world, plugin):
    import faults
    from harness import enable_plugin, run_hermes

    enable_plugin(world.home)
    faults.enable_local_semantic(plugin)  # the local model configured (and a consent, undone here)
    data = faults.data_dir(world.home)
    (data / "consent.json").unlink()
    (data / "consent.lock").unlink()
    repo = world.git_repo("app")
    world.session(repo, [("user", "the numbat rollout")])
    outside = plant_link(world, "consent.lock")
    done = run_hermes(world.home, "project-history", "allow", "--yes", "--all-projects", cwd=repo)
    assert not outside.exists(), "the lock followed the planted link"
    assert done.returncode != 0, done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "consent.lock is a symbolic link" in line and "Traceback" not in done.stderr, done.stderr
    assert not (world.home / "plugins" / "project-history-recall" / "consent.json").exists()


def test_a_hybrid_search_refuses_an_indexer_lock_that_is_a_symlink_and_keeps_keyword_results(world, plugin):
    import faults

    faults.enable_local_semantic(plugin, index_budget_seconds=60)
    repo = world.git_repo("app")
    earlier = world.session(repo, [("user", "The quokkaflux ledger migration runs in two batches")])
    current = world.session(repo, [("user", "hi")])
    outside = plant_link(world, "indexer.lock")
    answer = world.search(current, "quokkaflux ledger", mode="hybrid")
    assert not outside.exists(), "the lock followed the planted link"
    assert answer["success"] is True, answer
    assert session_ids(answer) == [earlier], answer
    assert "indexer.lock is a symbolic link" in answer.get("semantic_error", ""), answer
    assert "\n" not in answer["semantic_error"] and "Traceback" not in answer["semantic_error"]


def test_index_refuses_an_indexer_lock_that_is_a_symlink(world, plugin):
    import faults
    from harness import enable_plugin, run_hermes

    enable_plugin(world.home)
    faults.enable_local_semantic(plugin, index_budget_seconds=60)
    repo = world.git_repo("app")
    world.session(repo, [("user", "The quokkaflux ledger migration runs in two batches")])
    outside = plant_link(world, "indexer.lock")
    done = run_hermes(world.home, "project-history", "index", "--all-projects", cwd=repo)
    assert not outside.exists(), "the lock followed the planted link"
    assert done.returncode != 0, done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "indexer.lock is a symbolic link" in line and "Traceback" not in done.stderr, done.stderr


# --------------------------------------------------------------------------- attribution edges


def test_a_folder_whose_name_ends_in_a_space_is_its_projects(world):
    shop = world.folder("shop ")
    assert shop.endswith("shop ")
    world.project("Shop", shop)  # projects_db records "/.../shop", stripped, which does not exist
    # (when it exists, it is the folder meant: tests/test_hostile.py keeps its neighbour outside)
    earlier = world.session(shop, [("user", "The pelican checkout flow needs a retry button")])
    current = world.session(shop, [("user", "hi")])
    answer = world.search(current, "pelican checkout")
    assert answer["success"] is True, answer
    assert answer["project"]["name"] == "Shop", answer
    assert session_ids(answer) == [earlier], answer


@pytest.mark.parametrize("recorded_root", [False, True], ids=["cwd-only", "with-git-repo-root"])
def test_a_session_in_a_since_deleted_subfolder_stays_in_its_repository(world, recorded_root):
    import shutil

    repo = world.git_repo("app")
    sub = world.folder("app/tmp/scratch")
    earlier = world.session(
        sub,
        [("user", "The kookaburra fixture was generated in the scratch folder")],
        git_repo_root=repo if recorded_root else None,
    )
    shutil.rmtree(world.root / "app" / "tmp")  # removed from disk after the session
    current = world.session(repo, [("user", "hi")])
    answer = world.search(current, "kookaburra fixture")
    assert answer["success"] is True, answer
    assert session_ids(answer) == [earlier], answer


def test_the_terminal_search_json_escapes_control_characters_and_keeps_the_id(world):
    """``--json`` is read back by scripts: the id must parse as it is, yet a bidi override, an
    escape or a BEL must not reach the terminal raw (json.dumps with ensure_ascii=False writes
    U+202E as is)."""
    import json

    from harness import enable_plugin, run_hermes

    enable_plugin(world.home)
    repo = world.git_repo("app")
    world.db.create_session(HOSTILE_ID, "cli", cwd=repo)
    world.add(HOSTILE_ID, [("user", "the wombat rollout \u2066isolated\u2069 and \x85next")])
    world.session(repo)
    done = run_hermes(
        world.home, "project-history", "search", "wombat", "--mode", "keyword", "--json", cwd=repo
    )
    assert done.returncode == 0, done.stderr
    for bad in ("\x1b", "\x07", "\u202e", "\u2066", "\x85"):
        assert bad not in done.stdout, (bad, done.stdout)
    assert "\\u202e" in done.stdout, done.stdout
    answer = json.loads(done.stdout)
    assert answer["success"] is True, answer
    assert [hit["link"] for hit in answer["results"]] == [f"@session:{HOSTILE_ID}"], answer
