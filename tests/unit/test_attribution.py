"""attribution.py: which project a session row is in (spec §3.1), a pure function."""

from __future__ import annotations

import pytest


@pytest.fixture
def attr(phr):
    return phr.attribution


def project(pid: str, name: str, *folders: str, archived: bool = False) -> dict:
    return {"id": pid, "name": name, "archived": archived, "folders": [{"path": f} for f in folders]}


# --------------------------------------------------------------------------- path_key


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/a/proj", "/a/proj"),
        ("/a/proj/", "/a/proj"),
        ("/a//proj///", "/a/proj"),
        ("  /a/proj", ""),  # a leading space: a relative path, no place (never trimmed)
        ("/a/proj ", "/a/proj "),  # a trailing space is part of the folder's name
        ("/A/Proj", "/A/Proj"),  # POSIX keeps case
        ("/", ""),
        ("", ""),
        (None, ""),
        ("C:\\Users\\Me\\Repo\\", "c:/users/me/repo"),
        ("c:/users/me/repo", "c:/users/me/repo"),
        ("C:/USERS/ME/REPO//", "c:/users/me/repo"),
        ("\\\\Server\\Share\\Repo", "//server/share/repo"),  # UNC
        ("\\/Server/Share/Repo", "//server/share/repo"),  # UNC, mixed separators
        ("//SERVER/share/repo/", "/SERVER/share/repo"),  # POSIX: two leading slashes are one
        ("\\Users\\Me", "\\users/me"),  # backslash-rooted (current drive)
        # POSIX: "." and ".." are resolved, a backslash is part of a name.
        ("/x/app/../app2", "/x/app2"),
        ("/x/./app/.", "/x/app"),
        ("/../x", "/x"),  # ".." stops at the root
        ("/x/app\\evil", "/x/app\\evil"),
        ("C:\\Work\\..\\..\\Repo", "c:/repo"),  # ".." stops at the drive
        ("\\\\srv\\share\\..\\x", "//srv/share/x"),  # ... and at the share
        ("relative/path", ""),  # names no place
        ("C:relative", ""),
    ],
)
def test_path_key(attr, path, key):
    assert attr.path_key(path) == key


def test_windows_spellings_share_one_key_posix_spellings_do_not(attr):
    assert attr.path_key("C:\\Work\\Repo") == attr.path_key("c:/work/repo/") == "c:/work/repo"
    assert attr.path_key("/work/Repo") != attr.path_key("/work/repo")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("/users/me", "\\Users\\Me"),  # POSIX vs the root of the current Windows drive
        ("/srv/share", "\\\\srv\\share"),  # POSIX vs UNC
        ("/c:/x", "c:\\x"),  # a POSIX folder named "c:" vs drive C:
        ("\\users\\me", "\\\\users\\me"),  # current-drive root vs UNC
    ],
)
def test_path_kinds_never_collide(attr, one, other):
    assert attr.path_parts(one) != attr.path_parts(other)
    assert attr.path_key(one) != attr.path_key(other)
    assert not attr.is_path_under(one, other) and not attr.is_path_under(other, one)


# --------------------------------------------------------------------------- is_path_under


@pytest.mark.parametrize(
    ("folder", "target", "expected"),
    [
        ("/a/proj", "/a/proj", True),
        ("/a/proj", "/a/proj/src/x.py", True),
        ("/a/proj/", "/a/proj", True),
        ("/a/proj", "/a/proj/", True),
        ("/a/proj", "/a/proj2", False),  # sibling with a common string prefix
        ("/a/proj", "/a/proj2/src", False),
        ("/a/proj2", "/a/proj", False),
        ("/a/proj/src", "/a/proj", False),  # an ancestor is not under its child
        ("/a/Proj", "/a/proj", False),  # POSIX is case-sensitive
        ("/a/proj", "/a/PROJ/src", False),
        ("/a/100%", "/a/1000", False),
        ("/a/we_b", "/a/weXb", False),
        ("C:\\Work\\Repo", "c:/work/repo/src", True),  # Windows folds case and separators
        ("c:\\work\\repo\\", "C:\\WORK\\REPO", True),
        ("C:\\Work\\Repo", "C:\\Work\\Repo2", False),
        ("\\\\srv\\share", "\\\\SRV\\Share\\team\\x", True),
        ("\\\\srv\\share", "//SRV/Share/team/x", False),  # "//" starts a POSIX path
        # Issue 8: cwds recorded under /x/app that are not in it.
        ("/x/app", "/x/app/../app2", False),
        ("/x/app", "/x/app\\evil", False),
        ("/x/app", "//x/APP", False),
        ("/x/app", "//x/app/src", True),
        ("/x/app", "/x/app/sub/../src", True),
        ("/x/app", "/x/app/..", False),
        ("", "/a", False),
        (None, "/a", False),
        ("/a", "", False),
        ("/", "/a", False),  # the filesystem root owns nothing
    ],
)
def test_is_path_under(attr, folder, target, expected):
    assert attr.is_path_under(folder, target) is expected


# --------------------------------------------------------------------------- trusted_repo_root


@pytest.mark.parametrize(
    ("cwd", "root", "expected"),
    [
        ("/r/app/src", "/r/app", "/r/app"),
        ("/r/app", "/r/app", "/r/app"),
        ("/r/app/", "/r/app/", "/r/app/"),
        ("/notes", "/r/app", ""),  # stale: the conversation moved out of the repo
        ("/r/app2", "/r/app", ""),  # sibling prefix is not inside
        ("/r/App/src", "/r/app", ""),  # POSIX case
        ("c:\\work\\repo\\src", "C:\\Work\\Repo", "C:\\Work\\Repo"),
        ("", "/r/app", "/r/app"),  # no cwd: nothing contradicts the root
        (None, "/r/app", "/r/app"),
        ("/r/app", "", ""),
        ("/r/app", None, ""),
        ("/r/app", "   ", ""),
    ],
)
def test_trusted_repo_root(attr, cwd, root, expected):
    assert attr.trusted_repo_root(cwd, root) == expected


@pytest.mark.parametrize(
    ("cwd", "root", "worktree", "expected"),
    [
        ("/code/app-wt-x/src", "/code/app", "/code/app-wt-x", "/code/app"),  # sibling worktree
        ("/code/app-wt-x", "/code/app", "/code/app-wt-x/", "/code/app"),
        ("/code/app-wt-x", "/code/app", "/code/other", ""),  # git says another checkout
        ("/code/app-wt-x", "/code/app", None, ""),
        ("/code/app-wt-x", "/code/app", "", ""),
        ("/code/app/src", "/code/app", "/code/app", "/code/app"),
    ],
)
def test_trusted_repo_root_accepts_the_main_root_of_a_linked_worktree(attr, cwd, root, worktree, expected):
    assert attr.trusted_repo_root(cwd, root, worktree) == expected


def test_resolve_project_claims_a_sibling_worktree_through_its_main_repo(attr):
    app = project("p_app", "App", "/code/app")
    row = {"cwd": "/code/app-wt-x/src", "git_repo_root": "/code/app", "git_worktree_root": "/code/app-wt-x"}
    assert attr.resolve_project(row, [app]) == {"kind": "explicit", "id": "p_app", "name": "App"}
    assert attr.resolve_project(row, []) == {"kind": "auto", "key": "/code/app"}
    # Without git's word for the worktree, a root outside the cwd is stale.
    stale = {"cwd": "/code/app-wt-x/src", "git_repo_root": "/code/app"}
    assert attr.resolve_project(stale, [app]) == {"kind": "home"}


# --------------------------------------------------------------------------- FolderIndex


def test_folder_index_deepest_folder_wins(attr):
    outer = project("p_outer", "Outer", "/w")
    inner = project("p_inner", "Inner", "/w/app/lib")
    index = attr.FolderIndex([outer, inner])
    assert index.match("/w/app/lib/src/x.py") == (inner, 3)
    assert index.match("/w/app/lib") == (inner, 3)
    assert index.match("/w/app/libs") == (outer, 1)
    assert index.match("/w/app") == (outer, 1)
    assert index.match("/elsewhere") == (None, -1)
    assert index.match("") == (None, -1)
    # Order of the projects does not change which folder is deeper.
    assert attr.FolderIndex([inner, outer]).match("/w/app/lib/x") == (inner, 3)


def test_folder_index_first_project_keeps_a_shared_folder(attr):
    first = project("p_first", "First", "/shared")
    second = project("p_second", "Second", "/shared/", "/only-second")
    index = attr.FolderIndex([first, second])
    assert index.match("/shared/x") == (first, 1)
    assert index.match("/only-second/y") == (second, 1)
    assert attr.FolderIndex([second, first]).match("/shared/x") == (second, 1)


def test_folder_index_skips_archived_projects_and_accepts_plain_paths(attr):
    archived = project("p_old", "Old", "/w", archived=True)
    plain = {"id": "p_plain", "name": "Plain", "folders": ["/plain"]}
    index = attr.FolderIndex([archived, plain])
    assert index.match("/w/x") == (None, -1)
    assert index.match("/plain/x") == (plain, 1)


def test_folder_index_windows_casefold_and_posix_case(attr):
    win = project("p_win", "Win", "C:\\Users\\Me\\Repo")
    unc = project("p_unc", "Unc", "\\\\fileserver\\Team")
    posix = project("p_posix", "Posix", "/srv/Repo")
    index = attr.FolderIndex([win, unc, posix])
    assert index.match("c:/users/me/repo/src") == (win, 4)
    assert index.match("C:\\USERS\\ME\\REPO") == (win, 4)
    assert index.match("\\\\FileServer\\team\\docs") == (unc, 2)
    assert index.match("//FileServer/team/docs") == (None, -1)  # a POSIX path
    assert index.match("/srv/Repo/x") == (posix, 2)
    assert index.match("/srv/repo/x") == (None, -1)


# --------------------------------------------------------------------------- resolve_project


P = project("p_p", "P", "/a/proj")
Q = project("p_q", "Q", "/a/proj2")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"cwd": "/a/proj"}, {"kind": "explicit", "id": "p_p", "name": "P"}),
        ({"cwd": "/a/proj/src/", "git_repo_root": "/a/proj"}, {"kind": "explicit", "id": "p_p", "name": "P"}),
        ({"cwd": "/a/proj2/x"}, {"kind": "explicit", "id": "p_q", "name": "Q"}),
        # No cwd, only a root: the root decides.
        ({"cwd": None, "git_repo_root": "/a/proj2"}, {"kind": "explicit", "id": "p_q", "name": "Q"}),
        ({"cwd": "/a/proj3", "git_repo_root": "/a/proj3"}, {"kind": "auto", "key": "/a/proj3"}),
        ({"cwd": "/a/proj3/src", "git_repo_root": "/a/proj3/"}, {"kind": "auto", "key": "/a/proj3"}),
        ({"cwd": "/a/Proj/src", "git_repo_root": "/a/Proj"}, {"kind": "auto", "key": "/a/Proj"}),
        ({"cwd": "/a/proj3"}, {"kind": "home"}),  # no project folder, no git root
        ({"cwd": None, "git_repo_root": None}, {"kind": "home"}),
        ({}, {"kind": "home"}),
        ({"cwd": "   ", "git_repo_root": ""}, {"kind": "home"}),
        # Stale root (moved out of /a/proj on Hermes 0.19): not attributed to P.
        ({"cwd": "/notes", "git_repo_root": "/a/proj"}, {"kind": "home"}),
        ({"cwd": "/notes", "git_repo_root": "/r/other"}, {"kind": "home"}),
    ],
)
def test_resolve_project_three_states(attr, row, expected):
    assert attr.resolve_project(row, [P, Q]) == expected


def test_resolve_project_windows_paths(attr):
    win = project("p_win", "Win", "C:\\Users\\Me\\Repo")
    explicit = {"kind": "explicit", "id": "p_win", "name": "Win"}
    assert attr.resolve_project({"cwd": "c:/users/me/repo/src"}, [win]) == explicit
    assert attr.resolve_project({"cwd": "C:\\USERS\\ME\\REPO\\"}, [win]) == explicit
    assert attr.resolve_project({"cwd": "C:\\Users\\Me\\Repo2"}, [win]) == {"kind": "home"}
    assert attr.resolve_project({"cwd": "D:\\Code\\App\\src", "git_repo_root": "d:\\code\\app"}, [win]) == {
        "kind": "auto",
        "key": "d:/code/app",
    }
    # The same repo spelled two ways is one automatic project.
    one = attr.resolve_project({"cwd": "D:\\Code\\App", "git_repo_root": "D:\\Code\\App\\"}, [win])
    assert one == {"kind": "auto", "key": "d:/code/app"}
    # Stale on Windows too.
    assert attr.resolve_project({"cwd": "E:\\notes", "git_repo_root": "C:\\Users\\Me\\Repo"}, [win]) == {
        "kind": "home"
    }


def test_resolve_project_deeper_candidate_wins_and_ties_go_to_the_cwd(attr):
    outer = project("p_outer", "Outer", "/w")
    repo = project("p_repo", "Repo", "/w/repo")
    # The cwd (/w/repo/sub) matches Repo at depth 2; the root (/w/repo) also matches at depth 2.
    row = {"cwd": "/w/repo/sub", "git_repo_root": "/w/repo"}
    assert attr.resolve_project(row, [outer, repo])["id"] == "p_repo"
    # A cwd-only project deeper than the root's project wins.
    sub = project("p_sub", "Sub", "/w/repo/sub")
    assert attr.resolve_project(row, [outer, repo, sub])["id"] == "p_sub"
    # Both candidates at the same depth in different projects: the cwd's project wins.
    cwd_owner = project("p_cwd", "Cwd", "/x/y")
    root_owner = project("p_root", "Root", "/x/z")
    tie = {"cwd": "/x/y", "git_repo_root": "/x/z"}
    # /x/z does not contain /x/y, so the root is stale and only the cwd counts.
    assert attr.resolve_project(tie, [root_owner, cwd_owner])["id"] == "p_cwd"


def test_resolve_project_first_created_project_wins_on_a_shared_folder(attr):
    first = project("p_1", "First", "/shared/repo")
    second = project("p_2", "Second", "/shared/repo")
    row = {"cwd": "/shared/repo/src"}
    assert attr.resolve_project(row, [first, second]) == {"kind": "explicit", "id": "p_1", "name": "First"}


def test_resolve_project_excluded_roots_are_never_automatic_projects(attr):
    row = {"cwd": "/home/me", "git_repo_root": "/home/me"}
    home = attr.ExcludedRoots(roots=["/home/me/"])
    assert attr.resolve_project(row, [], excluded=home) == {"kind": "home"}
    other = attr.ExcludedRoots(roots=["/home/other"])
    assert attr.resolve_project(row, [], excluded=other) == {"kind": "auto", "key": "/home/me"}
    # An explicit project on an excluded folder is still honoured.
    mine = project("p_me", "Me", "/home/me")
    assert attr.resolve_project(row, [mine], excluded=home)["id"] == "p_me"


def test_excluded_trees_hold_nothing_automatic_but_explicit_projects_still_count(attr):
    junk = attr.ExcludedRoots(roots=["/home/me"], trees=["/home/me/.hermes"])
    plugin = {"cwd": "/home/me/.hermes/plugins/x", "git_repo_root": "/home/me/.hermes/plugins/x"}
    assert attr.resolve_project(plugin, [], excluded=junk) == {"kind": "home"}
    hermes_home = {"cwd": "/home/me/.hermes", "git_repo_root": "/home/me/.hermes"}
    assert attr.resolve_project(hermes_home, [], excluded=junk) == {"kind": "home"}
    # Only the home folder itself is junk, not what is under it.
    code = {"cwd": "/home/me/code/app", "git_repo_root": "/home/me/code/app"}
    assert attr.resolve_project(code, [], excluded=junk) == {"kind": "auto", "key": "/home/me/code/app"}
    # A sibling that shares a string prefix with HERMES_HOME is not under it.
    sibling = {"cwd": "/home/me/.hermes2", "git_repo_root": "/home/me/.hermes2"}
    assert attr.resolve_project(sibling, [], excluded=junk)["kind"] == "auto"
    mine = project("p_plugin", "Plugin work", "/home/me/.hermes/plugins/x")
    assert attr.resolve_project(plugin, [mine], excluded=junk)["id"] == "p_plugin"


def test_conversation_roots_follow_compression_chains(attr):
    continues = {
        "a": None,
        "b": "a",
        "c": "b",
        "d": None,
        "e": "d",
        "f": "e",
        "x": "gone",
        "l1": "l2",
        "l2": "l1",
    }
    roots = attr.conversation_roots(continues)
    assert [roots[s] for s in "abc"] == ["a", "a", "a"]
    assert [roots[s] for s in "def"] == ["d", "d", "d"]
    assert roots["x"] == "x"  # continues a session that is not there: starts its own
    assert roots["l1"] == roots["l2"]  # a loop still gives one conversation
    assert set(roots) == set(continues)


def test_resolve_project_accepts_a_prebuilt_index(attr):
    index = attr.FolderIndex([P, Q])
    assert attr.resolve_project({"cwd": "/a/proj2"}, index) == {"kind": "explicit", "id": "p_q", "name": "Q"}


# --------------------------------------------------------------------------- scope helpers


def test_same_project_and_scope_key(attr):
    p = {"kind": "explicit", "id": "p_p", "name": "P"}
    p_renamed = {"kind": "explicit", "id": "p_p", "name": "Renamed"}
    q = {"kind": "explicit", "id": "p_q", "name": "Q"}
    auto = {"kind": "auto", "key": "/r/app"}
    home = {"kind": "home"}
    assert attr.same_project(p, p_renamed) is True
    assert attr.same_project(p, q) is False
    assert attr.same_project(auto, {"kind": "auto", "key": "/r/app"}) is True
    assert attr.same_project(auto, {"kind": "auto", "key": "/r/app2"}) is False
    assert attr.same_project(home, home) is False  # Home is no project
    assert attr.scope_key(home) == ("home", "")
    assert attr.scope_key(auto) == ("auto", "/r/app")


def test_same_project_over_resolved_rows_keeps_order_and_isolates_sibling_prefixes(attr):
    """What ProjectMap does for every session: resolve each row, keep those same_project says."""
    rows = [
        {"id": "s1", "cwd": "/a/proj"},
        {"id": "s2", "cwd": "/a/proj2/src"},
        {"id": "s3", "cwd": "/a/proj/deep/er"},
        {"id": "s4", "cwd": None},
        {"id": "s5", "cwd": "/a/projx", "git_repo_root": "/a/proj"},  # stale root
        {"id": "s6", "cwd": None, "git_repo_root": "/a/proj"},
    ]
    p = {"kind": "explicit", "id": "p_p", "name": "P"}
    q = {"kind": "explicit", "id": "p_q", "name": "Q"}
    index = attr.FolderIndex([P, Q])

    def sessions_in(identity: dict) -> list[str]:
        return [row["id"] for row in rows if attr.same_project(identity, attr.resolve_project(row, index))]

    assert sessions_in(p) == ["s1", "s3", "s6"]
    assert sessions_in(q) == ["s2"]
    assert sessions_in({"kind": "home"}) == []
