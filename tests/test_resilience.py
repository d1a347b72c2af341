"""Issue 7: trouble in the semantic layer never takes keyword search down.

Each fault below is injected into a home whose semantic index was built (local MiniLM, consented)
and whose keyword results for :data:`QUERY` were recorded first. Then, for ``keyword``,
``semantic`` and ``hybrid`` alike, the tool through the real dispatcher must answer
``success: true`` with those same keyword results, ``semantic_status: "unavailable"`` and a
``semantic_error`` naming the fix, with no traceback, each call in under 2 s; and the
``hermes project-history`` commands must fail with exactly one line saying the same.

The contract (``semantic_error``, its fix texts, one stderr line, ``no_db`` for a state.db with
no session tables, at most one connection per database per search) is the one issue 7's refactor
lands; see the module docstring of ``faults.py`` for how root is made to honour permissions.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import faults
import pytest
from faults import MODES, Call
from harness import PLUGIN_MODULE, enable_plugin, session_ids

QUERY = "ledger"  # in both earlier sessions' text, in nothing else
CALL_SECONDS = 2.0
FILLER = [
    f"Note {n}: the {topic} checklist item {n} is done and verified by the night shift."
    for n, topic in enumerate(["backup", "firewall", "printer", "badge", "laptop", "parking"] * 5)
]


@dataclass(frozen=True)
class Case:
    name: str
    # The fix semantic_error must name: any one group, every text of the group (case-insensitive).
    fixes: tuple[tuple[str, ...], ...]
    child: bool = False  # tool calls in a child Python rather than in this process
    drop_privileges: bool = False
    hidden_module: str | None = None


DAMAGED = (("revoke --purge",),)
READ_ONLY = (("permission",), ("read-only",))
CASES = [
    Case("garbage", DAMAGED),
    Case("half_truncated", DAMAGED),
    Case("zero_bytes", DAMAGED),
    Case("read_only_file", READ_ONLY, child=True, drop_privileges=True),
    Case("read_only_folder", READ_ONLY, child=True, drop_privileges=True),
    Case("locked", (("locked",),)),
    Case("future_schema", (("newer", "revoke --purge"),)),
    Case("numpy_missing", (("pip install", "numpy"),), child=True, hidden_module="numpy"),
    Case("onnxruntime_missing", (("pip install", "onnxruntime"),), child=True, hidden_module="onnxruntime"),
]


def names_the_fix(text: str, fixes: tuple[tuple[str, ...], ...]) -> bool:
    folded = text.casefold()
    return any(all(part.casefold() in folded for part in group) for group in fixes)


# --------------------------------------------------------------------------- the home


@pytest.fixture
def indexed(world, plugin):
    """A project with two earlier sessions that :data:`QUERY` finds, a filler session (so the
    index spans many pages) and the current one; semantic search on, consented, index complete."""
    enable_plugin(world.home)  # child processes and the CLI load the plugin from this home
    faults.enable_local_semantic(plugin, index_budget_seconds=120)
    world.repo = world.folder("app", git=True)
    world.pid = world.project("App", world.repo)
    world.migration = world.session(
        world.repo,
        [
            ("user", "The quokkaflux ledger migration runs in two batches after the freeze"),
            ("assistant", "Noted: two batches, after the freeze."),
        ],
        title="Ledger migration",
    )
    world.invoices = world.session(
        world.repo, [("user", "The invoice ledger export writes CSV files to the zanzibar share")]
    )
    world.notes = world.session(world.repo, [("user", text) for text in FILLER])
    world.current = world.session(world.repo, [("user", "hi")])

    clean = world.search(world.current, QUERY, mode="keyword")
    world.baseline = session_ids(clean)
    assert sorted(world.baseline) == sorted([world.migration, world.invoices]), clean
    built = world.search(world.current, QUERY, mode="hybrid")
    assert built["semantic_status"] == "ready", built  # complete: no background indexing runs
    world.embeddings = faults.embeddings_db(world.home)
    faults.settle(world.embeddings)
    return world


@dataclass
class Fault:
    case: Case
    world: object
    pythonpath: Path | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def calls(self) -> list[Call]:
        world = self.world
        if self.case.child:
            return faults.call_tool_in_child(
                world.home,
                world.current,
                QUERY,
                pythonpath=self.pythonpath,
                drop_privileges=self.case.drop_privileges,
            )
        return [faults.call_tool_in_process(world.current, QUERY, mode) for mode in MODES]

    def cli(self, *args: str):
        return faults.run_cli(
            self.world.home,
            "project-history",
            *args,
            cwd=self.world.repo,
            pythonpath=self.pythonpath,
            drop_privileges=self.case.drop_privileges,
        )


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def fault(request, indexed, tmp_path):
    case: Case = request.param
    db = indexed.embeddings
    injected = Fault(case, indexed)
    if case.name == "garbage":
        faults.write_garbage(db)
    elif case.name == "half_truncated":
        faults.truncate_to_half(db)
    elif case.name == "zero_bytes":
        faults.empty(db)
    elif case.name == "read_only_file":
        injected.cleanups.append(faults.remove_write_bits(db))
        faults.assert_permissions_bind(db)
    elif case.name == "read_only_folder":
        injected.cleanups.append(faults.remove_write_bits(faults.data_dir(indexed.home)))
        faults.assert_permissions_bind(faults.data_dir(indexed.home))
    elif case.name == "locked":
        holder = faults.hold_exclusive_lock(db)
        injected.cleanups.append(lambda: faults.release(holder))
    elif case.name == "future_schema":
        faults.future_schema(db)
    elif case.hidden_module:
        injected.pythonpath = faults.hiding_modules(tmp_path / "hide", [case.hidden_module])
        faults.assert_hidden(indexed.home, injected.pythonpath, case.hidden_module)
    else:
        raise AssertionError(case.name)
    yield injected
    for cleanup in reversed(injected.cleanups):
        cleanup()


# --------------------------------------------------------------------------- the tool


def test_every_mode_keeps_keyword_results_and_names_the_fix(fault):
    problems = []
    for call in fault.calls():
        where = f"[{fault.case.name}/{call.mode}]"
        if "Traceback" in call.raw:
            problems.append(f"{where} traceback text in the result")
        try:
            data = json.loads(call.raw)
        except ValueError:
            problems.append(f"{where} not JSON: {call.raw[:300]}")
            continue
        if data.get("success") is not True:
            problems.append(f"{where} success={data.get('success')!r} error={data.get('error')!r}")
        if session_ids(data) != fault.world.baseline:
            problems.append(f"{where} results {session_ids(data)} != clean keyword {fault.world.baseline}")
        if data.get("semantic_status") != "unavailable":
            problems.append(f"{where} semantic_status={data.get('semantic_status')!r}")
        error = data.get("semantic_error")
        if not isinstance(error, str) or not names_the_fix(error, fault.case.fixes):
            problems.append(f"{where} semantic_error={error!r} does not name {fault.case.fixes}")
        if call.seconds >= CALL_SECONDS:
            problems.append(f"{where} took {call.seconds:.2f}s")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# --------------------------------------------------------------------------- the CLI


def test_cli_fails_with_one_line_naming_the_fix(fault):
    world = fault.world
    runs = {
        "status": fault.cli("status"),
        "index": fault.cli("index", "--all-projects"),
        "search": fault.cli("search", QUERY, "--mode", "hybrid"),
    }
    problems = []
    for name, done in runs.items():
        where = f"[{fault.case.name}/{name}]"
        lines = faults.stderr_lines(done)
        if done.returncode == 0:
            problems.append(f"{where} exit code 0")
        if "Traceback" in done.stdout + done.stderr:
            problems.append(f"{where} traceback: {done.stderr[-600:]}")
        if len(lines) != 1 or not lines[0].startswith("hermes project-history:"):
            problems.append(f"{where} stderr is not one 'hermes project-history:' line: {lines[-5:]}")
        elif not names_the_fix(lines[0], fault.case.fixes):
            problems.append(f"{where} {lines[0]!r} does not name {fault.case.fixes}")
    found = runs["search"].stdout
    missing = [sid for sid in world.baseline if f"@session:{sid}" not in found]
    if missing:
        problems.append(f"[{fault.case.name}/search] keyword results {missing} not on stdout")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# --------------------------------------------------------------------------- no session tables


@pytest.fixture
def delegations_only(plugin, tmp_path):
    """A fresh home in which Hermes's first ``import model_tools`` made state.db: one table."""
    home = tmp_path / "fresh"
    home.mkdir()
    enable_plugin(home)
    assert not (home / "state.db").exists()
    folder = tmp_path / "somewhere"
    folder.mkdir()
    made = subprocess.run(
        [faults.PYTHON, "-c", "import model_tools"],
        env=faults.child_env(home),
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    with sqlite3.connect(home / "state.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    conn.close()
    assert tables == ["async_delegations"], tables
    return home, folder


def test_state_db_without_session_tables_is_no_db(delegations_only):
    home, _ = delegations_only
    calls = faults.call_tool_in_child(home, "20260101_000000_abcdef", QUERY)
    for call in calls:
        assert "Traceback" not in call.raw, call.raw
        assert call.data == {"success": False, "error": "session database not found", "code": "no_db"}, (
            call.mode,
            call.raw,
        )


def test_cli_search_without_session_tables_says_one_line(delegations_only):
    home, folder = delegations_only
    done = faults.run_cli(home, "project-history", "search", QUERY, "--mode", "hybrid", cwd=folder)
    lines = faults.stderr_lines(done)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-1500:]
    assert len(lines) == 1 and lines[0].startswith("hermes project-history:"), lines[-5:]
    assert "session database not found" in lines[0], lines


# --------------------------------------------------------------------------- no write, one open


def test_keyword_search_leaves_a_read_only_embeddings_db_untouched(indexed, tmp_path):
    """On a copy whose embeddings.db and data folder are read-only, a keyword search still finds
    what it finds on the original, and the database's bytes and mtime do not change."""
    copy = tmp_path / "copy"
    shutil.copytree(indexed.home, copy, symlinks=True)
    db = faults.embeddings_db(copy)
    assert not any(p.exists() for p in faults.companions(db))
    restore = [faults.remove_write_bits(db), faults.remove_write_bits(faults.data_dir(copy))]
    try:
        faults.assert_permissions_bind(db)
        before = (db.read_bytes(), db.stat().st_mtime_ns)
        (call,) = faults.call_tool_in_child(
            copy, indexed.current, QUERY, modes=["keyword"], drop_privileges=True
        )
        after = (db.read_bytes(), db.stat().st_mtime_ns)
    finally:
        for undo in reversed(restore):
            undo()
    assert "Traceback" not in call.raw, call.raw
    assert call.data.get("success") is True, call.raw
    assert session_ids(call.data) == indexed.baseline, call.raw
    assert after[1] == before[1], "embeddings.db mtime changed"
    assert after[0] == before[0], "embeddings.db bytes changed"
    assert not any(p.exists() for p in faults.companions(db))


@contextlib.contextmanager
def _plugin_connects():
    """The database files the plugin's own code connects to inside the block, in order."""
    opened: list[Path] = []
    real_connect = sqlite3.connect

    def recording_connect(database, *args, **kwargs):
        if _called_from_plugin():
            path = _database_file(database, bool(kwargs.get("uri")))
            if path is not None:
                opened.append(path)
        return real_connect(database, *args, **kwargs)

    sqlite3.connect = recording_connect
    try:
        yield opened
    finally:
        sqlite3.connect = real_connect


def _database_file(database, uri: bool) -> Path | None:
    """The file a ``sqlite3.connect`` argument names (``file:...?mode=ro`` URIs included)."""
    name = os.fspath(database)
    if isinstance(name, bytes):
        name = name.decode()
    if name in ("", ":memory:"):
        return None
    if uri or name.startswith("file:"):
        parts = urllib.parse.urlsplit(name)
        name = urllib.parse.unquote(parts.path)
        if not name or name == ":memory:":
            return None
    return Path(name).resolve()


def _called_from_plugin() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(PLUGIN_MODULE):
            return True
        frame = frame.f_back
    return False


def test_one_hybrid_search_opens_each_database_at_most_once_per_path(indexed, tmp_path):
    """state.db once for the keyword path and once for the semantic side, which runs beside it
    on a worker (semantic.search_beside); projects.db and embeddings.db once."""
    warm = indexed.search(indexed.current, QUERY, mode="hybrid")
    assert warm["semantic_status"] == "ready", warm  # index complete: nothing runs in the background

    with _plugin_connects() as opened:
        # The recorder itself: a connect from a plugin module's code counts, one from the test does not.
        probe: dict = {"__name__": PLUGIN_MODULE + ".probe", "sqlite3": sqlite3}
        exec("def probe(path):\n    sqlite3.connect(path, uri=True).close()\n", probe)
        scratch = tmp_path / "probe.db"
        probe["probe"](f"file:{scratch}?mode=rwc")
        sqlite3.connect(scratch).close()
        assert opened == [scratch.resolve()], opened
        opened.clear()
        result = indexed.search(indexed.current, QUERY, mode="hybrid")

    assert result["semantic_status"] == "ready", result
    assert set(indexed.baseline) <= set(session_ids(result)), result
    counts = collections.Counter(opened)
    files = {
        "state.db": (indexed.home / "state.db").resolve(),
        "projects.db": (indexed.home / "projects.db").resolve(),
        "embeddings.db": indexed.embeddings.resolve(),
    }
    allowed = {"state.db": 2, "projects.db": 1, "embeddings.db": 1}
    too_many = {name: counts[path] for name, path in files.items() if counts[path] > allowed[name]}
    assert not too_many, f"opened too often in one hybrid search: {too_many} (all: {dict(counts)})"


def test_a_hybrid_search_without_consent_opens_state_db_once(world):
    """Hybrid is the tool's default and a new user has given no consent: the semantic side answers
    ``consent_required`` in the caller, with no worker and no second connection to state.db."""
    repo = world.folder("app")
    world.project("App", repo)
    world.session(repo, [("user", "the ledger migration")])
    current = world.session(repo)
    world.search(current, QUERY, mode="hybrid")  # the process's first search opens its data watch
    with _plugin_connects() as opened:
        result = world.search(current, QUERY, mode="hybrid")
    assert result["semantic_status"] == "consent_required", result
    assert session_ids(result), result
    assert collections.Counter(opened)[(world.home / "state.db").resolve()] == 1, opened
