"""``scope: all`` on the developer-agent transcripts (issue 32 part 1), through the dispatcher.

    .venv/bin/python bench/scope_all.py
    .venv/bin/python bench/scope_all.py --limit-questions 20
    .venv/bin/python bench/scope_all.py --locomo

Every question of ``devsessions.py``'s home (``--locomo``: the LoCoMo home; keyword mode, limit
10) is asked from its project's fresh session three times: without ``scope``, with
``scope: "project"`` and with ``scope: "all"``.
``identical``: questions whose ``project`` answer equals the answer without ``scope`` (must be all);
``misordered``: ``all`` answers where a result of another project comes before one of the asking
project (must be 0); ``unnamed``: ``all`` results without a ``project`` (must be 0); ``wrong_name``:
results whose ``project`` is not the project their session was built in (must be 0); ``others``:
results from other projects; ``found``: questions whose answer session is among the results, for
the project scope and for ``all``. ``--dump``: the answers without ``scope``, the ids of this build of the
home replaced by stable names, to compare with another commit's (run this file from a checkout of
it, with its own ``PHR_BENCH_CACHE``, then ``cmp`` the two files).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import world  # noqa: I001  (before anything imports Hermes: harness pins HERMES_HOME)
import devsessions
import locomo


def devsessions_home(limit: int) -> tuple[list[Asked], dict[str, str], dict[str, str]]:
    """The transcripts home: its questions, each session's project id, and the names that stand for
    the ids one build of the home gave (sessions, projects) in ``--dump``."""
    projects, questions = devsessions.load()
    if limit:
        questions = questions[:limit]
    built = devsessions.build_home(projects)
    world.activate_env(built.home)
    world.install(built.home)  # this checkout's plugin, even in a cached home
    project_of = {t.id: built.projects[p.id] for p in projects for t in p.sessions}
    asked = [
        Asked(
            q.text,
            built.fresh[q.project],
            built.projects[q.project],
            frozenset(sid for sid, transcript in built.sessions.items() if transcript in q.answers),
        )
        for q in questions
    ]
    names = {
        **{sid: f"session:{t}" for sid, t in built.sessions.items()},
        **{sid: f"fresh:{p}" for p, sid in built.fresh.items()},
        **{pid: f"project:{p}" for p, pid in built.projects.items()},
    }
    return asked, {sid: project_of[t] for sid, t in built.sessions.items() if t in project_of}, names


def locomo_home(limit: int) -> tuple[list[Asked], dict[str, str], dict[str, str]]:
    """The LoCoMo home: a conversation is a project."""
    conversations = locomo.load()
    built = world.build_home("locomo")
    world.activate_env(built.home)
    world.install(built.home)
    asked = [
        Asked(
            q.text,
            built.fresh[q.conversation],
            built.projects[q.conversation],
            frozenset(built.session_of(q.conversation, n) for n in q.gold if n),
        )
        for conv in conversations
        for q in conv.questions
    ]
    names = {
        **{sid: f"session:{conv}/{n}" for sid, (conv, n) in built.sessions.items()},
        **{sid: f"fresh:{conv}" for conv, sid in built.fresh.items()},
        **{pid: f"project:{conv}" for conv, pid in built.projects.items()},
    }
    project_of = {sid: built.projects[conv] for sid, (conv, _) in built.sessions.items()}
    return asked[:limit] if limit else asked, project_of, names


@dataclass
class Asked:
    text: str
    session_id: str  # asked from
    project: str  # its project's id
    answers: frozenset[str]  # the sessions that answer it


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit-questions", type=int, default=0)
    parser.add_argument("--locomo", action="store_true", help="the LoCoMo home instead")
    parser.add_argument("--dump", type=Path, help="write the answers without scope here (JSON)")
    args = parser.parse_args(argv)
    questions, project_of, names = (locomo_home if args.locomo else devsessions_home)(args.limit_questions)
    import model_tools

    tally = {"identical": 0, "misordered": 0, "unnamed": 0, "wrong_name": 0, "results": 0, "others": 0}
    found = {"project": 0, "all": 0}
    plains = []

    def ask(number: int, q: Asked, **extra: str) -> dict:
        raw = model_tools.handle_function_call(
            devsessions.TOOL,
            {"query": q.text, "mode": "keyword", "limit": 10, **extra},
            task_id=f"scope-{number}",
            session_id=q.session_id,
        )
        result = json.loads(raw)
        if not result.get("success"):
            raise SystemExit(f"search failed for question {number}: {result}")
        return result

    for number, q in enumerate(questions):
        plain, project, every = ask(number, q), ask(number, q, scope="project"), ask(number, q, scope="all")
        tally["identical"] += plain == project
        plains.append(plain)
        inside = [(r.get("project") or {}).get("id") == q.project for r in every["results"]]
        tally["misordered"] += inside != sorted(inside, reverse=True)
        for row in every["results"]:
            tally["results"] += 1
            named = row.get("project")
            tally["unnamed"] += not named
            if named and row["session_id"] in project_of:
                tally["wrong_name"] += named.get("id") != project_of[row["session_id"]]
            tally["others"] += bool(named) and named.get("id") != q.project
        for name, result in (("project", project), ("all", every)):
            found[name] += bool(q.answers & {r["session_id"] for r in result["results"]})
    if args.dump:
        text = json.dumps(plains, ensure_ascii=False, indent=0)
        ids = re.compile("|".join(map(re.escape, sorted(names, key=len, reverse=True))))
        args.dump.write_text(ids.sub(lambda found: names[found.group()], text), encoding="utf-8")
    figures = {"questions": len(questions), **tally, "found": found}
    print(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
