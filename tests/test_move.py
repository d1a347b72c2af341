"""project_session_move through the real Hermes: the cwd moves, the project follows it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harness import World, session_ids

KEEPS_CWD = (
    ". The running session keeps its process working directory until it is resumed; "
    "history searches use the new project now."
)
NO_PROJECT_FOR_CWD = {
    "success": True,
    "results": [],
    "message": "No project context (the working directory is in no project or git repository)",
    "sessions_in_scope": 0,
}


def explicit(pid: str, name: str) -> dict:
    return {"kind": "explicit", "id": pid, "name": name}


def test_move_to_a_plain_folder_project_then_search_uses_it(world):
    p_repo = world.git_repo("code/p", branch="dev")
    q_dir = world.folder("docs/q")
    p = world.project("P", p_repo)
    q = world.project("Q", q_dir)
    p_mate = world.session(p_repo, [("user", "xylophone tuning in P")], git_repo_root=p_repo)
    q_mate = world.session(q_dir, [("user", "xylophone tuning in Q")])
    me = world.session(p_repo, [("user", "my own xylophone notes")], git_repo_root=p_repo)
    world.db.update_session_cwd(me, p_repo, git_branch="dev")

    before = world.search(me, "xylophone")
    assert (before["project"], session_ids(before)) == (explicit(p, "P"), [p_mate])

    assert world.move(me, q) == {
        "success": True,
        "project": explicit(q, "Q"),
        "cwd": q_dir,
        "git_branch": None,
        "git_repo_root": None,
        "message": f"Moved to project Q, cwd now {q_dir}{KEEPS_CWD}",
        "live_session": "unchanged until resumed",
    }
    row = world.row(me)
    # Hermes 0.19 cannot clear git fields: the old root stays, and readers must ignore it.
    assert (row["cwd"], row["git_repo_root"], row["git_branch"]) == (q_dir, p_repo, "dev")

    after = world.search(me, "xylophone")
    assert (after["project"], session_ids(after)) == (explicit(q, "Q"), [q_mate])
    # And P no longer sees the moved conversation.
    assert session_ids(world.search(p_mate, "xylophone", limit=10)) == []
    assert session_ids(world.search(q_mate, "xylophone", limit=10)) == [me]


def test_move_to_a_git_project_records_its_branch_and_root(world):
    p_dir = world.folder("notes/p")
    q_repo = world.git_repo("code/q", branch="trunk")
    p = world.project("P", p_dir)
    q = world.project("Q", q_repo)
    me = world.session(p_dir, [("user", "zither")])
    q_mate = world.session(q_repo, [("user", "zither in q")])
    world.session(p_dir, [("user", "zither in p")])
    result = world.move(me, q)
    assert result == {
        "success": True,
        "project": explicit(q, "Q"),
        "cwd": q_repo,
        "git_branch": "trunk",
        "git_repo_root": q_repo,
        "message": f"Moved to project Q, cwd now {q_repo}{KEEPS_CWD}",
        "live_session": "unchanged until resumed",
    }
    row = world.row(me)
    assert (row["cwd"], row["git_repo_root"], row["git_branch"]) == (q_repo, q_repo, "trunk")
    after = world.search(me, "zither")
    assert (after["project"], session_ids(after)) == (explicit(q, "Q"), [q_mate])
    assert p != q


def test_move_by_slug(world):
    a = world.folder("a")
    b = world.folder("b")
    world.project("Alpha", a)
    beta = world.project("Beta Project", b)
    me = world.session(a)
    result = world.move(me, "beta-project")
    assert (result["success"], result["project"], result["cwd"]) == (True, explicit(beta, "Beta Project"), b)


def test_move_to_a_worktree_project_folds_into_the_main_repo(world):
    main = world.git_repo("code/app")
    wt = world.worktree(main, "code/app-wt-feature", "feature")
    pid = world.project("Feature", wt)
    elsewhere = world.folder("elsewhere")
    me = world.session(elsewhere)
    result = world.move(me, pid)
    assert (result["project"], result["cwd"], result["git_branch"], result["git_repo_root"]) == (
        explicit(pid, "Feature"),
        wt,
        "feature",
        main,
    )


def test_move_to_home_uses_terminal_cwd_then_search_has_no_project(world):
    repo = world.git_repo("code/app")
    pid = world.project("App", repo)
    world.session(repo, [("user", "yodel practice")])
    me = world.session(repo, [("user", "yodel")], git_repo_root=repo)
    landing = world.folder("landing")
    world.write_config(f"terminal:\n  cwd: {landing}\n")
    assert world.move(me, "") == {
        "success": True,
        "project": {"kind": "home"},
        "cwd": landing,
        "git_branch": None,
        "git_repo_root": None,
        "message": f"Moved to Home, cwd now {landing}{KEEPS_CWD}",
        "live_session": "unchanged until resumed",
    }
    assert (world.row(me)["cwd"], world.row(me)["git_repo_root"]) == (landing, repo)
    assert world.search(me, "yodel") == NO_PROJECT_FOR_CWD
    assert pid


@pytest.mark.parametrize("configured", [None, "auto", ".", "/definitely/not/a/folder"])
def test_move_to_home_without_a_usable_terminal_cwd_goes_to_the_home_folder(world, configured):
    repo = world.git_repo("code/app")
    world.project("App", repo)
    me = world.session(repo, git_repo_root=repo)
    if configured is not None:
        world.write_config(f"terminal:\n  cwd: {configured}\n")
    home = str(Path.home())
    result = world.move(me, "")
    assert (result["success"], result["project"], result["cwd"]) == (True, {"kind": "home"}, home)
    assert result["message"] == f"Moved to Home, cwd now {home}{KEEPS_CWD}"
    assert world.row(me)["cwd"] == home
    assert world.search(me, "anything") == NO_PROJECT_FOR_CWD


def test_move_back_and_forth(world):
    a = world.folder("a")
    b = world.folder("b")
    pa = world.project("A", a)
    pb = world.project("B", b)
    a_mate = world.session(a, [("user", "kestrel a")])
    b_mate = world.session(b, [("user", "kestrel b")])
    me = world.session(a)
    for target, mate, pid, name in ((pb, b_mate, pb, "B"), ("", None, None, None), (pa, a_mate, pa, "A")):
        assert world.move(me, target)["success"] is True
        result = world.search(me, "kestrel")
        if mate is None:
            assert result == NO_PROJECT_FOR_CWD
        else:
            assert (result["project"], session_ids(result)) == (explicit(pid, name), [mate])


def test_move_reanchors_the_live_session_when_hermes_offers_the_hook(world, monkeypatch):
    from tools import project_tools

    a = world.folder("a")
    pid = world.project("A", a)
    me = world.session(None)
    calls = []
    monkeypatch.setattr(project_tools, "_workspace_callback", lambda *args: calls.append(args))
    result = world.call("project_session_move", {"project_id": pid}, me, task_id="task-42")
    assert calls == [("task-42", a, "A")]
    assert result["live_session"] == "re-anchored"
    assert result["message"] == f"Moved to project A, cwd now {a}"


def test_move_to_a_folder_claimed_by_an_older_project_warns(world):
    shared = world.folder("shared")
    first = world.project("First", shared)
    second = world.project("Second", shared)
    world.order_projects(first, second)
    me = world.session(None)
    result = world.move(me, second)
    assert result["success"] is True
    assert result["project"] == explicit(first, "First")
    assert result["warning"] == (
        f"{shared} is also claimed by another project, so this conversation is attributed to First"
    )


# --------------------------------------------------------------------------- errors


def test_move_to_an_unknown_project(world):
    a = world.project("A", world.folder("a"))
    me = world.session(world.folder("a"))
    before = world.table_checksums()
    assert world.move(me, "p_nothere0") == {
        "success": False,
        "error": "project not found: p_nothere0",
        "projects": [{"id": a, "name": "A"}],  # so the model can retry
    }
    assert world.table_checksums() == before


def test_move_to_an_unknown_project_without_projects_db(world):
    me = world.session(world.folder("a"))
    assert world.move(me, "p_abc123") == {
        "success": False,
        "error": "project not found: p_abc123",
        "projects": [],
    }
    assert not (world.home / "projects.db").exists()


def test_move_to_a_project_whose_folder_is_gone(world):
    gone = world.folder("gone")
    pid = world.project("Gone", gone)
    me = world.session(world.folder("here"))
    shutil.rmtree(gone)
    before = world.table_checksums()
    assert world.move(me, pid) == {"success": False, "error": f"project folder not found: {gone}"}
    assert world.table_checksums() == before
    assert world.row(me)["cwd"] == str(world.root / "here")


NOT_A_STRING = "project_id must be a string: a project id such as 'p_abc123', or '' for Home"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({}, "project_id is required: a project id such as 'p_abc123', or '' for Home"),
        ({"project_id": 42}, NOT_A_STRING),
        ({"project_id": ["p_x"]}, NOT_A_STRING),
        ({"project_id": None}, NOT_A_STRING),  # issue 8.12: null is not Home; only '' is
        ({"project_id": True}, NOT_A_STRING),
        ({"project_id": {"id": "p_x"}}, NOT_A_STRING),
    ],
)
def test_bad_move_input_is_a_json_error(world, args, error):
    me = world.session(world.folder("a"))
    result = world.call("project_session_move", args, me)
    assert result == {"success": False, "error": error}
    assert world.row(me)["cwd"] == str(world.root / "a")


def test_move_without_a_session_id(world, monkeypatch):
    monkeypatch.delenv("HERMES_SESSION_ID", raising=False)
    pid = world.project("A", world.folder("a"))
    assert world.move(None, pid) == {
        "success": False,
        "error": "no current session to move (the call carried no session id)",
    }


def test_move_of_an_unknown_session(world):
    pid = world.project("A", world.folder("a"))
    before = world.table_checksums()
    assert world.move("20990101_000000_abcdef", pid) == {
        "success": False,
        "error": "session not found: 20990101_000000_abcdef",
    }
    assert world.table_checksums() == before


def test_move_without_state_db(plugin, tmp_path, monkeypatch):
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    w = World.__new__(World)
    w.home = home
    assert w.move("20260101_000000_abcdef", "") == {
        "success": False,
        "error": "session database not found",
        "code": "no_db",
    }
    assert not (home / "state.db").exists()


def test_move_reports_the_project_the_next_search_uses(world):
    # The desktop rule: a worktree is also claimed through its main repo, the deeper folder wins.
    main = world.git_repo("deep/er/still/app")
    wt = world.worktree(main, "wt", "feature")
    app = world.project("App", main)
    feature = world.project("Feature", wt)
    mate = world.session(main, [("user", "quail")])
    me = world.session(None)
    moved = world.move(me, feature)
    search = world.search(me, "quail")
    assert moved["project"] == search["project"] == explicit(app, "App")
    assert (
        moved["warning"]
        == f"{wt} is also claimed by another project, so this conversation is attributed to App"
    )
    assert session_ids(search) == [mate]


def test_move_by_name_and_a_not_found_list_capped_at_20(world):
    target = world.folder("named")
    pid = world.project("Billing Service", target)
    for n in range(21):
        world.project(f"Other {n}", world.folder(f"other{n}"))
    me = world.session(world.folder("named"))
    missing = world.move(me, "no such project")
    assert missing["success"] is False
    assert len(missing["projects"]) == 20 and missing["projects_not_listed"] == 2
    assert set(missing["projects"][0]) == {"id", "name"}
    moved = world.move(me, "billing service")
    assert moved["success"], moved
    assert moved["project"]["id"] == pid


def test_a_not_found_list_names_the_git_repositories_search_reports_as_projects(world):
    """Issue #28: the list named the created projects only, so the model could not retry with a
    repository that search itself had called this conversation's project."""
    created = world.project("Billing", world.folder("billing"))
    repo = world.git_repo("shop")
    world.session(repo, [("user", "The cart keeps its items for a week")])
    me = world.session(repo, [("user", "a question in the shop repository")])
    assert world.search(me, "cart items")["project"] == {"kind": "auto", "key": repo}
    missing = world.move(me, "no such project")
    assert missing["success"] is False and missing["error"] == "project not found: no such project"
    assert missing["projects"] == [
        {"id": created, "name": "Billing"},
        {"id": f"repo:{repo}", "name": "git repository shop"},
    ]
    moved = world.move(me, missing["projects"][1]["id"])  # what the list offers works as given
    assert moved["success"], moved
