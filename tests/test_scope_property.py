"""Property (issue 8): no search, in any mode, returns a conversation whose real folder is
outside the current project, and the scope is the same on the first call and the tenth.

Hypothesis draws small random worlds (deterministically: ``derandomize=True``): folders named
with ``%``, ``_``, case variants and unicode (NFC and NFD), nested; git repositories among them
(nested ones too) and one under ``$HERMES_HOME/plugins``; symlinks between folders; projects over
folders, symlinks and Windows paths (nested, sharing folders); and sessions whose recorded cwd is
a folder, a missing sub-folder, ``f/../g``, ``//f``, a case variant, ``f\\x``, a path through a
symlink, a Windows spelling (drive, UNC, ``..``, other case) or nothing, with no git root, the
true one, a stale one or a Windows one, some of them continuing an earlier one after a
compression. Every example lives in its own folder of one shared Hermes home (so a leak across
examples would show too), built through Hermes's ``SessionDB`` and ``projects_db``, and every
search goes through ``model_tools.handle_function_call``.

The expected scope comes from an independent model of the rules (``oracle``), written with
``os.path.realpath``, ``ntpath``/``PureWindowsPath`` and the list of repositories the example
created, not with the plugin's code. Semantic search runs against a loopback embedding server
(a hashed bag of words: this test is about scope, not about ranking).
"""

from __future__ import annotations

import itertools
import ntpath
import os
import re
import subprocess
import zlib
from pathlib import PureWindowsPath

import numpy as np
import pytest
from embedding_server import EmbeddingServer
from harness import World, new_session_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Folders that differ only in case, NFC/NFD, wildcards or trailing/leading whitespace are all
# different folders on Linux, and must stay different projects.
NAMES = ["app", "app2", "APP", "a%b", "a_b", "axb", "ü", "u\u0308", "日本", "x.y", "sp ace"]
NAMES += ["app ", "app\n", " app"]
WORD = "zebra"  # in every message of every example: a leak across examples would be found
MODES = ("keyword", "semantic", "hybrid")
WINDOWS_FORMS = ["in", "case", "dotdot", "unc", "auto"]
DIM = 64


def hashed_bag_of_words(texts: list[str], _is_query: bool) -> np.ndarray:
    vectors = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in re.findall(r"\w+", text.casefold()):
            vectors[row, zlib.crc32(word.encode()) % DIM] += 1.0
        vectors[row] /= max(float(np.linalg.norm(vectors[row])), 1e-6)
    return vectors


@pytest.fixture(scope="module")
def shared(plugin, tmp_path_factory):
    """One Hermes home for every example, semantic search on (consented for all projects)."""
    root = tmp_path_factory.mktemp("scope-property")
    home = root / "home"
    home.mkdir()
    user_home = root / "user-home"
    user_home.mkdir()
    with pytest.MonkeyPatch.context() as patch, EmbeddingServer(hashed_bag_of_words) as server:
        patch.setenv("HERMES_HOME", str(home))
        patch.setenv("HOME", str(user_home))
        # The property is about which sessions are in scope, not about git's speed on a busy
        # machine (test_scope_holes covers the budget): git always gets the time it needs here.
        patch.setattr(plugin.projects.git, "FILL_BUDGET_SECONDS", 60.0)
        from hermes_cli.config import save_config

        save_config(
            {
                "plugins": {
                    "project-history-recall": {
                        "embedding": {
                            "enabled": True,
                            "model": "hash-64",
                            "base_url": server.base_url,
                            "index_budget_seconds": 60,
                        }
                    }
                }
            },
            merge_existing=True,
        )
        env = plugin.store.HermesEnv.current()
        record = plugin.semantic.consent.consent_record(
            env.settings.embedding, env.profile, ["*"], "2026-12-01T00:00:00"
        )
        plugin.semantic.consent.write_consent(env, record)
        world = World(home, root / "work")
        world.examples = itertools.count(1)
        try:
            yield world
        finally:
            world.close()


# --------------------------------------------------------------------------- drawing a world

folder = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(tuple)
win_folder = st.lists(st.sampled_from(NAMES), min_size=1, max_size=2).map(tuple)


@st.composite
def plans(draw):
    folders = draw(st.lists(folder, min_size=2, max_size=5, unique=True))
    pick = st.sampled_from(folders)
    repos = draw(st.lists(pick, max_size=2, unique=True))
    links = draw(st.lists(st.tuples(pick, st.sampled_from(NAMES), pick), max_size=2))
    refs = st.one_of(
        pick.map(lambda f: ("dir", f)),
        st.integers(0, 1).map(lambda i: ("link", i)),
        win_folder.map(lambda f: ("win", f)),
        st.just(("junk",)),
    )
    projects = draw(st.lists(st.lists(refs, min_size=1, max_size=2), max_size=3))
    sub = st.none() | st.sampled_from(NAMES)
    cwd = st.one_of(
        st.tuples(st.just("plain"), pick, sub),
        st.tuples(st.just("dotdot"), pick, st.sampled_from(NAMES)),
        st.tuples(st.just("double"), pick),
        st.tuples(st.just("case"), pick),
        st.tuples(st.just("backslash"), pick, st.sampled_from(NAMES)),
        st.tuples(st.just("link"), st.integers(0, 1), sub),
        st.tuples(st.just("junk"), sub),
        st.tuples(
            st.just("win"), st.sampled_from(["in", "case", "dotdot", "unc", "auto"]), win_folder, win_folder
        ),
        st.just(("none",)),
    )
    root = st.one_of(
        st.just(None),
        st.just(("true",)),
        pick.map(lambda f: ("stale", f)),
        st.just(("parent",)),
    )
    sessions = draw(st.lists(st.tuples(cwd, root, st.none() | st.integers(0, 6)), min_size=2, max_size=6))
    return {"folders": folders, "repos": repos, "links": links, "projects": projects, "sessions": sessions}


# --------------------------------------------------------------------------- the independent model


def windows(path: str) -> bool:
    return bool(re.match(r"^[A-Za-z]:([/\\]|$)", path)) or path.startswith("\\")


def canon(path: str | None) -> tuple | None:
    """A path as a tuple of names: real POSIX paths, normalised case-folded Windows paths."""
    value = (path or "").strip()
    if not value:
        return None
    if windows(value):
        parts = PureWindowsPath(ntpath.normpath(value.replace("/", "\\"))).parts
        return ("win", *(part.casefold() for part in parts))
    if value.startswith("/"):
        return ("posix", *(name for name in os.path.realpath(value).split("/") if name))
    return None


def under(folder: tuple | None, target: tuple | None) -> bool:
    if not folder or not target:
        return False
    named = len(folder) - (2 if folder[0] == "win" else 1)  # a root owns nothing
    return named > 0 and target[: len(folder)] == folder


class Oracle:
    def __init__(self, projects: list[tuple[str, list[str]]], repos: list[str], hermes_home: str, home: str):
        self.projects = [(pid, [canon(f) for f in folders]) for pid, folders in projects]
        self.repos = [canon(r) for r in repos]
        self.hermes_home, self.home = canon(hermes_home), canon(home)

    def git_root(self, cwd: str) -> tuple | None:
        real = os.path.realpath(cwd)
        while not os.path.isdir(real):  # removed since: its repository still holds it (issue 31)
            if os.path.dirname(real) == real:
                return None
            real = os.path.dirname(real)
        inside = [r for r in self.repos if under(r, canon(real))]
        return max(inside, key=len) if inside else None

    def identity(self, cwd: str | None, recorded_root: str | None) -> tuple:
        rc, rr = canon(cwd), canon(recorded_root)
        if rc and rr and not under(rr, rc):
            rr = None  # stale: Hermes 0.19 cannot clear it
        if rc and not rr and rc[0] == "posix":
            rr = self.git_root(cwd)
        best, best_depth = None, -1
        for candidate in (rc, rr):
            for pid, folders in self.projects:
                for folder in folders:
                    if under(folder, candidate) and len(folder) > best_depth:
                        best, best_depth = pid, len(folder)
        if best is not None:
            return ("explicit", best)
        if rr and rr != self.home and not under(self.hermes_home, rr):
            return ("auto", rr)
        return ("home",)


def shown(identity: tuple) -> dict:
    """The ``project`` the tool should report for an oracle identity."""
    if identity[0] == "explicit":
        return {"kind": "explicit", "id": identity[1]}
    parts = identity[1]
    if parts[0] == "posix":
        return {"kind": "auto", "key": "/" + "/".join(parts[1:])}
    anchor = parts[1].rstrip("\\")
    return {"kind": "auto", "key": anchor + "/" + "/".join(parts[2:])}


# --------------------------------------------------------------------------- building it


def build(world: World, plan: dict) -> dict:
    n = next(world.examples)
    base = world.root / f"ex{n}"
    path = {f: str(base.joinpath(*f)) for f in plan["folders"]}
    for folder_path in path.values():
        os.makedirs(folder_path, exist_ok=True)
    repos = []
    for f in plan["repos"]:
        subprocess.run(["git", "init", "-q", path[f]], check=True)
        repos.append(path[f])
    junk_repo = world.home / "plugins" / f"ex{n}-plugin"
    junk_repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(junk_repo)], check=True)
    repos.append(str(junk_repo))
    links = []
    for at, name, target in plan["links"]:
        link = os.path.join(path[at], f"{name}-link")
        if not os.path.lexists(link):
            os.symlink(path[target], link, target_is_directory=True)
        links.append(link)

    def ref_path(ref) -> str | None:
        if ref[0] == "dir":
            return path[ref[1]]
        if ref[0] == "link":
            return links[ref[1]] if ref[1] < len(links) else None
        if ref[0] == "win":
            return f"C:\\Ex{n}\\" + "\\".join(ref[1])
        return str(junk_repo)

    from hermes_cli import projects_db

    projects = []
    for k, refs in enumerate(plan["projects"]):
        folders = list(dict.fromkeys(p for p in map(ref_path, refs) if p))
        if not folders:
            continue
        placeholders = {
            f: world.folder(f"ex{n}-placeholder/{k}/{i}") for i, f in enumerate(folders) if windows(f)
        }
        pid = world.project(f"ex{n} project {k}", *[placeholders.get(f, f) for f in folders])
        with projects_db.connect_closing(world.home / "projects.db") as conn:
            for real_name, placeholder in placeholders.items():
                conn.execute(
                    "UPDATE project_folders SET path = ? WHERE project_id = ? AND path = ?",
                    (real_name, pid, placeholder),
                )
            conn.commit()
        projects.append((pid, folders))
    world.order_projects(*(pid for pid, _ in projects))
    oracle = Oracle(projects, repos, str(world.home), os.environ["HOME"])

    def cwd_of(form) -> tuple[str | None, str | None]:
        kind = form[0]
        if kind == "plain":
            return os.path.join(path[form[1]], *[form[2]] if form[2] else []), None
        if kind == "dotdot":
            return f"{path[form[1]]}/../{form[2]}", None
        if kind == "double":
            return "/" + path[form[1]], None
        if kind == "case":
            head, tail = os.path.split(path[form[1]])
            return os.path.join(head, tail.swapcase()), None
        if kind == "backslash":
            return f"{path[form[1]]}\\{form[2]}", None
        if kind == "link":
            if form[1] >= len(links):
                return None, None
            return os.path.join(links[form[1]], *[form[2]] if form[2] else []), None
        if kind == "junk":
            return os.path.join(str(junk_repo), *[form[1]] if form[1] else []), None
        if kind == "win":
            _, how, one, two = form
            spelled = {
                "in": f"c:/ex{n}/" + "/".join(one) + "/sub",
                "case": f"C:\\EX{n}\\" + "\\".join(one).upper(),
                "dotdot": f"C:\\Ex{n}\\" + "\\".join(one) + "\\..\\" + "\\".join(two),
                "unc": f"\\\\srv\\ex{n}\\" + "\\".join(one),
                "auto": f"D:\\Ex{n}\\" + "\\".join(one) + "\\src",
            }[how]
            return spelled, (f"d:\\ex{n}\\" + "\\".join(one) if how == "auto" else None)
        return None, None

    sessions: list[dict] = []
    for i, (form, root_form, continues) in enumerate(plan["sessions"]):
        cwd, root = cwd_of(form)
        if root_form and cwd and not root:
            if root_form[0] == "true":
                truth = oracle.git_root(cwd) if not windows(cwd) else None
                root = "/" + "/".join(truth[1:]) if truth else None
            elif root_form[0] == "stale":
                root = path[root_form[1]]
            elif root_form[0] == "parent" and not windows(cwd):
                root = os.path.dirname(cwd.rstrip("/")) or None
        parent = sessions[continues] if continues is not None and continues < i else None
        text = f"{WORD} example {n} session {i}"
        if parent is None:
            sid = world.session(cwd, [("user", text)], git_repo_root=root)
        else:
            world.db.end_session(parent["id"], "compression")
            sid = new_session_id()
            world.db.create_session(sid, "cli", cwd=cwd, parent_session_id=parent["id"])
            if root and cwd:
                world.db.update_session_cwd(sid, cwd, git_repo_root=root)
            world.add(sid, [("user", text)])
        conversation = parent["conversation"] if parent else sid
        sessions.append({"id": sid, "cwd": cwd, "root": root, "conversation": conversation})
    for session in sessions:
        session["identity"] = oracle.identity(session["cwd"], session["root"])
    return {"n": n, "sessions": sessions}


# --------------------------------------------------------------------------- the property


def conversations_of(result: dict) -> list[str]:
    return [r.get("parent_session_id") or r["session_id"] for r in result.get("results", [])]


@settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(plan=plans())
def test_no_search_leaves_the_current_project_and_the_scope_is_stable(shared, plan):
    world = shared
    built = build(world, plan)
    sessions = built["sessions"]
    by_id = {s["id"]: s for s in sessions}
    repeated = False
    for current in sessions:
        identity = current["identity"]
        expected = {
            s["conversation"]
            for s in sessions
            if s["identity"] == identity and s["conversation"] != current["conversation"]
        }
        for mode in MODES:
            result = world.search(current["id"], WORD, mode=mode, limit=10)
            context = f"example {built['n']}, {mode} from {current['cwd']!r}: {result}"
            assert result["success"] is True, context
            assert "scope_complete" not in result, context
            if identity == ("home",):
                assert (result["results"], result["sessions_in_scope"]) == ([], 0), context
                continue
            if "project" not in result:  # spec §七: alone in its project
                assert result["message"] == "No other sessions in this project", context
                assert (result["results"], result["sessions_in_scope"], expected) == ([], 1, set()), context
                continue
            project = {k: v for k, v in result["project"].items() if k != "name"}
            assert project == shown(identity), context
            if mode != "keyword":  # the semantic path really ran, over this scope
                assert result["semantic_status"] == "ready", context
            for row in result["results"]:
                hit = by_id.get(row["session_id"])
                assert hit is not None, f"a session of another example: {context}"
                assert hit["identity"] == identity, f"outside the project: {hit} in {context}"
                assert hit["conversation"] != current["conversation"], context
            got = conversations_of(result)
            assert len(got) == len(set(got)), f"a conversation twice: {context}"
            assert result["sessions_in_scope"] == len(expected) + 1, context
            if mode == "keyword":  # every message has the word: keyword finds every conversation
                assert set(got) == expected, context
            else:
                assert set(got) <= expected, context
            if mode == "keyword" and not repeated:
                repeated = True
                for _ in range(9):
                    assert world.search(current["id"], WORD, mode=mode, limit=10) == result, context
