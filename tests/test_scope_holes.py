"""Issue 8 (items 1-5, 12) and the scope part of issue 10, through the real dispatcher.

Every search here is ``model_tools.handle_function_call`` in a real Hermes home; git runs for
real. Where a test needs git to be slow or counted, it wraps the plugin's own probe function.
"""

from __future__ import annotations

import importlib
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from harness import new_session_id, session_ids

NO_PROJECT_FOR_CWD = {
    "success": True,
    "results": [],
    "message": "No project context (the working directory is in no project or git repository)",
    "sessions_in_scope": 0,
}


def explicit(pid: str, name: str) -> dict:
    return {"kind": "explicit", "id": pid, "name": name}


@pytest.fixture
def git_roots(plugin):
    return importlib.import_module(f"{plugin.__name__}.projects.git")


@pytest.fixture
def git_runs(git_roots, monkeypatch):
    """Every folder git is asked about by the plugin, in order."""
    asked: list[str] = []
    real = git_roots._probe_repo_roots

    def counting(cwd):
        asked.append(cwd)
        return real(cwd)

    monkeypatch.setattr(git_roots, "_probe_repo_roots", counting)
    return asked


# --------------------------------------------------------------------------- 8.1 paths


@pytest.fixture
def p_and_q(world):
    """P owns /x/app, Q owns /x/app2; one conversation in each says 'okapi'."""
    world.app = world.folder("x/app")
    world.app2 = world.folder("x/app2")
    world.p = world.project("P", world.app)
    world.q = world.project("Q", world.app2)
    world.p_mate = world.session(world.app, [("user", "okapi in P")])
    world.q_mate = world.session(world.app2, [("user", "okapi in Q")])
    return world


def test_dotdot_out_of_p_is_q(p_and_q):
    w = p_and_q
    sneaky = w.session(f"{w.app}/../app2", [("user", "okapi recorded as app/../app2")])
    from_p = w.search(w.session(w.app), "okapi", limit=10)
    assert (from_p["project"], session_ids(from_p)) == (explicit(w.p, "P"), [w.p_mate])
    from_q = w.search(w.session(w.app2), "okapi", limit=10)
    assert sorted(session_ids(from_q)) == sorted([w.q_mate, sneaky])
    assert w.search(sneaky, "okapi")["project"] == explicit(w.q, "Q")


def test_symlink_inside_p_pointing_at_q_is_q(p_and_q):
    w = p_and_q
    link = Path(w.app) / "link2"
    link.symlink_to(w.app2, target_is_directory=True)
    (Path(w.app2) / "src").mkdir()
    through_link = w.session(str(link / "src"), [("user", "okapi through the link")])
    from_p = w.search(w.session(w.app), "okapi", limit=10)
    assert session_ids(from_p) == [w.p_mate]
    from_q = w.search(w.session(w.app2), "okapi", limit=10)
    assert sorted(session_ids(from_q)) == sorted([w.q_mate, through_link])


def test_a_backslash_is_part_of_a_posix_name(p_and_q):
    w = p_and_q
    evil = f"{w.app}\\evil"  # the folder "app\evil" next to app, not inside it
    os.mkdir(evil)
    beside = w.session(evil, [("user", "okapi beside P")])
    assert session_ids(w.search(w.session(w.app), "okapi", limit=10)) == [w.p_mate]
    assert w.search(beside, "okapi") == NO_PROJECT_FOR_CWD


def test_two_leading_slashes_are_posix_and_keep_case(p_and_q):
    w = p_and_q
    shouted = "/" + str(Path(w.app).parent / "APP")  # //.../x/APP: another folder on POSIX
    os.mkdir(shouted[1:])
    other = w.session(shouted, [("user", "okapi in APP")])
    same = w.session("/" + w.app, [("user", "okapi in //app")])  # //.../x/app is P's folder
    from_p = w.search(w.session(w.app), "okapi", limit=10)
    assert sorted(session_ids(from_p)) == sorted([w.p_mate, same])
    assert w.search(other, "okapi") == NO_PROJECT_FOR_CWD


def test_a_cwd_reaching_a_repository_through_a_symlink_is_in_it(world):
    repo = world.git_repo("code/app")
    (Path(repo) / "src").mkdir()
    alias = world.root / "alias"
    alias.symlink_to(repo, target_is_directory=True)
    via_alias = world.session(str(alias / "src"), [("user", "quince via the alias")])
    direct = world.session(repo, [("user", "quince directly")])
    result = world.search(via_alias, "quince")
    assert result["project"] == {"kind": "auto", "key": repo}
    assert session_ids(result) == [direct]
    from_repo = world.search(world.session(repo), "quince", limit=10)
    assert sorted(session_ids(from_repo)) == sorted([via_alias, direct])


def test_a_project_folder_that_is_a_symlink_owns_the_real_folder(world):
    real = world.folder("data/notes")
    link = world.root / "notes-link"
    link.symlink_to(real, target_is_directory=True)
    pid = world.project("Notes", str(link))
    recorded_real = world.session(real, [("user", "lark in the real folder")])
    recorded_link = world.session(str(link), [("user", "lark via the link")])
    result = world.search(world.session(real), "lark", limit=10)
    assert result["project"] == explicit(pid, "Notes")
    assert sorted(session_ids(result)) == sorted([recorded_real, recorded_link])


# --------------------------------------------------------------------------- 8.2 deterministic scope


def test_hundreds_of_cli_sessions_in_one_repo_cost_one_git_run_and_are_all_in_scope(world, git_runs):
    repo = world.git_repo("mono")
    sessions = [
        world.session(world.folder(f"mono/pkg{n}/src"), [("user", f"walrus {n}")]) for n in range(150)
    ]
    current = world.session(world.folder("mono/tools"))
    first = world.search(current, "walrus", limit=10)
    assert first["project"] == {"kind": "auto", "key": repo}
    assert first["sessions_in_scope"] == len(sessions) + 1
    assert "scope_complete" not in first
    assert git_runs == [repo]  # one marker, one git run, whatever the number of folders
    for _ in range(9):
        assert world.search(current, "walrus", limit=10) == first
    assert git_runs == [repo]


def test_a_folder_in_no_repository_never_runs_git_and_never_expires(world, git_runs):
    loose = world.folder("loose")
    world.session(loose, [("user", "yak")])
    assert world.search(world.session(loose), "yak") == NO_PROJECT_FOR_CWD
    assert git_runs == []


def test_slow_git_for_other_folders_is_reported_not_silently_narrowed(world, git_roots, monkeypatch):
    outer = world.folder("outer")
    pid = world.project("Outer", outer)
    mine = world.git_repo("outer/mine")
    slow = world.git_repo("outer/slow")
    released = threading.Event()
    real = git_roots._probe_repo_roots

    def probe(cwd):
        if cwd == slow:
            released.wait(10)
        return real(cwd)

    monkeypatch.setattr(git_roots, "_probe_repo_roots", probe)
    monkeypatch.setattr(git_roots, "FILL_BUDGET_SECONDS", 0.2)
    mate = world.session(world.folder("outer/mine/src"), [("user", "gannet in mine")])
    waiting = [world.session(world.folder(f"outer/slow/p{n}"), [("user", f"gannet {n}")]) for n in range(3)]
    current = world.session(mine)

    first = world.search(current, "gannet", limit=10)
    assert first["project"] == explicit(pid, "Outer")  # the current folder is always answered
    assert session_ids(first) == [mate]
    assert (first["scope_complete"], first["sessions_pending"]) == (False, len(waiting))

    released.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        later = world.search(current, "gannet", limit=10)
        if "scope_complete" not in later:
            break
        time.sleep(0.05)
    assert sorted(session_ids(later)) == sorted([mate, *waiting])
    assert later["sessions_in_scope"] == 5


def test_git_giving_no_answer_is_said_and_not_remembered(world, git_roots, monkeypatch):
    repo = world.git_repo("code/app")
    other = world.session(world.folder("code/app/lib"), [("user", "avocet")])
    current = world.session(repo)
    real = git_roots._git
    monkeypatch.setattr(git_roots, "_git", lambda cwd, *args: None)  # timed out, say
    unsure = world.search(current, "avocet")
    assert unsure == {**NO_PROJECT_FOR_CWD, "scope_complete": False, "sessions_pending": 1}
    monkeypatch.setattr(git_roots, "_git", real)
    result = world.search(current, "avocet")
    assert (result["project"], session_ids(result)) == ({"kind": "auto", "key": repo}, [other])
    assert "scope_complete" not in result


def test_git_answers_persist_in_the_plugins_own_file(world, plugin, git_roots, git_runs):
    repo = world.git_repo("code/app")
    other = world.session(world.folder("code/app/lib"), [("user", "tern")])
    current = world.session(repo)
    assert session_ids(world.search(current, "tern")) == [other]
    store = world.home / "plugins" / "project-history-recall" / "git_roots.db"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert git_runs == [repo]

    plugin.reset_process_state()  # what a new process knows
    assert session_ids(world.search(current, "tern")) == [other]
    assert git_runs == [repo]  # answered from git_roots.db, git not asked again


@pytest.mark.parametrize("damage", ["garbage", "directory"])
def test_a_broken_git_roots_file_never_fails_a_search(world, plugin, git_roots, damage):
    store = world.home / "plugins" / "project-history-recall" / "git_roots.db"
    store.parent.mkdir(parents=True, exist_ok=True)
    if damage == "garbage":
        store.write_bytes(b"this is not a database" * 100)
    else:
        store.mkdir()
    repo = world.git_repo("code/app")
    other = world.session(world.folder("code/app/lib"), [("user", "plover")])
    plugin.reset_process_state()
    result = world.search(world.session(repo), "plover")
    assert (result["project"], session_ids(result)) == ({"kind": "auto", "key": repo}, [other])


def test_a_changed_git_entry_is_asked_again(world, plugin, git_roots, git_runs):
    repo = world.git_repo("code/app")
    other = world.session(world.folder("code/app/lib"), [("user", "stilt")])
    assert session_ids(world.search(world.session(repo), "stilt")) == [other]
    # The repository is replaced by a new one at the same place: its .git is another entry.
    import shutil
    import subprocess

    shutil.rmtree(Path(repo) / ".git")
    subprocess.run(["git", "init", "-q", repo], check=True)
    plugin.reset_process_state()
    git_runs.clear()
    assert session_ids(world.search(world.session(repo), "stilt")) == [other]
    assert git_runs == [repo]


# --------------------------------------------------------------------------- 8.3 junk folders


def test_a_repository_under_hermes_home_is_never_an_automatic_project(world):
    plugin_repo = world.home / "plugins" / "some-plugin"
    plugin_repo.mkdir(parents=True)
    import subprocess

    subprocess.run(["git", "init", "-q", str(plugin_repo)], check=True)
    (plugin_repo / "src").mkdir()
    world.session(str(plugin_repo), [("user", "ibis in a plugin")])
    here = world.session(str(plugin_repo / "src"), [("user", "ibis again")])
    assert world.search(here, "ibis") == NO_PROJECT_FOR_CWD
    # Reached through a symlink, HERMES_HOME's subtree is still Hermes's own.
    world.root.mkdir(parents=True, exist_ok=True)
    alias = world.root / "hermes-alias"
    alias.symlink_to(world.home, target_is_directory=True)
    via_alias = world.session(str(alias / "plugins" / "some-plugin"), [("user", "ibis via alias")])
    assert world.search(via_alias, "ibis") == NO_PROJECT_FOR_CWD
    # A project the user made there is still honoured.
    pid = world.project("Plugin work", str(plugin_repo))
    result = world.search(here, "ibis", limit=10)
    assert result["project"] == explicit(pid, "Plugin work")
    assert len(session_ids(result)) == 2


# --------------------------------------------------------------------------- 8.4 compressed conversations


def compressed(world, cwd: str, *texts: str) -> list[str]:
    """One conversation that Hermes compressed: a chain of sessions, one text each."""
    chain = [world.session(cwd, [("user", texts[0])])]
    for text in texts[1:]:
        world.db.end_session(chain[-1], "compression")
        child = new_session_id()
        world.db.create_session(child, "cli", cwd=cwd, parent_session_id=chain[-1])
        world.add(child, [("user", text)])
        chain.append(child)
    return chain


def test_a_compressed_conversation_is_one_result(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    chain = compressed(world, repo, "puffin before", "puffin after", "puffin later still")
    other = world.session(repo, [("user", "a single puffin")])
    result = world.search(world.session(repo), "puffin", limit=2)
    assert len(result["results"]) == 2
    conversations = {r.get("parent_session_id") or r["session_id"] for r in result["results"]}
    assert conversations == {chain[0], other}
    for row in result["results"]:
        if row["session_id"] in chain[1:]:
            assert row["parent_session_id"] == chain[0]
    assert result["sessions_in_scope"] == 3  # two other conversations and this one


def test_the_current_conversation_is_excluded_whole(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    chain = compressed(world, repo, "murre one", "murre two", "murre three")
    other = world.session(repo, [("user", "murre elsewhere")])
    for segment in chain:
        assert session_ids(world.search(segment, "murre", limit=10)) == [other]


def test_a_move_moves_the_whole_compressed_conversation(world):
    a = world.folder("a")
    b = world.folder("b")
    pa = world.project("A", a)
    pb = world.project("B", b)
    chain = compressed(world, a, "auklet one", "auklet two", "auklet three")
    a_mate = world.session(a, [("user", "auklet in A")])
    b_mate = world.session(b, [("user", "auklet in B")])
    moved = world.move(chain[-1], pb)
    assert moved["success"] is True
    assert moved["project"] == explicit(pb, "B")
    assert moved["moved_sessions"] == chain
    assert all(world.row(sid)["cwd"] == b for sid in chain)
    assert session_ids(world.search(a_mate, "auklet", limit=10)) == []
    from_b = world.search(b_mate, "auklet", limit=10)
    assert {r.get("parent_session_id") or r["session_id"] for r in from_b["results"]} == {chain[0]}
    assert pa


# --------------------------------------------------------------------------- 8.5 move to Home


@pytest.fixture
def fake_home(world, monkeypatch) -> str:
    home = world.folder("user-home")
    monkeypatch.setenv("HOME", home)
    return home


def test_home_move_falls_back_to_the_home_folder_when_terminal_cwd_is_in_a_project(world, fake_home):
    other_dir = world.folder("other")
    other = world.project("Other", other_dir)
    landing = world.folder("other/landing")
    world.write_config(f"terminal:\n  cwd: {landing}\n")
    world.session(other_dir, [("user", "grebe in Other")])
    me = world.session(world.folder("mine"), [("user", "grebe")])
    result = world.move(me, "")
    assert (result["success"], result["project"], result["cwd"]) == (True, {"kind": "home"}, fake_home)
    assert result["message"].startswith(
        f"Moved to Home, cwd now {fake_home} (terminal.cwd {landing} is in project Other, "
        "so the home folder is used)"
    )
    assert world.row(me)["cwd"] == fake_home
    assert world.search(me, "grebe") == NO_PROJECT_FOR_CWD
    assert other


def test_home_move_is_refused_when_every_candidate_is_in_a_project(world, fake_home):
    everything = world.project("Everything", str(world.root))
    landing = world.folder("landing")
    world.write_config(f"terminal:\n  cwd: {landing}\n")
    me = world.session(world.folder("mine"))
    before = world.table_checksums()
    result = world.move(me, "")
    assert result == {
        "success": False,
        "error": (
            f"cannot move to Home: {landing} is in project Everything and {fake_home} is in project "
            "Everything; set terminal.cwd to a folder outside every project, or move this "
            "conversation to a project instead"
        ),
    }
    assert world.table_checksums() == before
    assert everything


def test_home_move_uses_terminal_cwd_in_no_project(world, fake_home):
    landing = world.folder("landing")
    world.write_config(f"terminal:\n  cwd: {landing}\n")
    me = world.session(world.folder("mine"))
    result = world.move(me, "")
    assert (result["cwd"], result["project"]) == (landing, {"kind": "home"})
    assert "terminal.cwd" not in result["message"]


# --------------------------------------------------------------------------- 8.12 move input


def test_a_huge_project_id_is_not_echoed_in_full(world):
    me = world.session(world.folder("a"))
    huge = "p_" + "x" * (1 << 20)
    result = world.move(me, huge)
    assert result == {
        "success": False,
        "error": f"project not found: {huge[:64]}… ({len(huge)} characters)",
        "projects": [],  # the projects to retry with (issue 9): none in this home
    }


@pytest.mark.parametrize(
    ("project_id", "shown"),
    [
        ("p_\ud800x", "p_\\ud800x"),  # a lone surrogate cannot be encoded: escaped, not a crash
        ("p_\x00\x1b[31m", "p_\\u0000\\u001b[31m"),
        ("p_\u200b", "p_\\u200b"),
    ],
)
def test_unprintable_project_ids_are_not_found_and_escaped(world, project_id, shown):
    me = world.session(world.folder("a"))
    before = world.table_checksums()
    result = world.move(me, project_id)
    assert result == {"success": False, "error": f"project not found: {shown}", "projects": []}
    assert world.table_checksums() == before


# --------------------------------------------------------------------------- issue 10: once per change


@pytest.fixture
def reads(plugin, monkeypatch):
    """How many times the session rows were read (the scope rebuilt)."""
    hermes_db = importlib.import_module(f"{plugin.__name__}.store")
    counter = {"n": 0}
    real = hermes_db.HermesDB.session_links

    def counting(self):
        counter["n"] += 1
        return real(self)

    monkeypatch.setattr(hermes_db.HermesDB, "session_links", counting)
    return counter


def test_the_scope_is_read_once_per_change_of_the_data(world, reads, git_roots, fake_home, monkeypatch):
    monkeypatch.setattr(git_roots, "FACTS_TTL_SECONDS", 1e9)  # no filesystem re-check mid-test
    repo = world.folder("alpha")
    pid = world.project("Alpha", repo)
    mate = world.session(repo, [("user", "heron")])
    current = world.session(repo)
    first = world.search(current, "heron")
    for _ in range(5):
        assert world.search(current, "heron") == first
    assert reads["n"] == 1

    newcomer = world.session(world.folder("alpha/sub"), [("user", "heron too")])  # state.db changed
    assert sorted(session_ids(world.search(current, "heron", limit=10))) == sorted([mate, newcomer])
    assert reads["n"] == 2

    elsewhere = world.folder("beta")
    outsider = world.session(elsewhere, [("user", "heron outside")])
    from hermes_cli import projects_db

    with projects_db.connect_closing(world.home / "projects.db") as conn:  # projects.db changed
        projects_db.add_folder(conn, pid, elsewhere, label="beta")
        conn.commit()
    after = world.search(current, "heron", limit=10)
    assert sorted(session_ids(after)) == sorted([mate, newcomer, outsider])

    world.move(outsider, "")  # the move writes state.db through Hermes
    assert sorted(session_ids(world.search(current, "heron", limit=10))) == sorted([mate, newcomer])
