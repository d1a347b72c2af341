"""Run by another Hermes's Python (the fresh venv of test_fresh_install.py), not by pytest.

``python fresh_world.py make <work dir>``: two projects with a few conversations, made with that
Hermes's SessionDB and projects_db; prints their ids as JSON.
``python fresh_world.py search <session id> <mode> <query>``: the tool through that Hermes's
dispatcher (``model_tools.handle_function_call``, which loads the installed plugin); prints its JSON.
``python fresh_world.py move <session id> <project id>``: the move tool, likewise.
``python fresh_world.py catalog``: the tool definitions that Hermes would offer a model, as JSON.

HERMES_HOME comes from the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def make(work: Path) -> dict:
    from hermes_cli import projects_db
    from hermes_state import SessionDB

    home = Path(os.environ["HERMES_HOME"])
    db = SessionDB(db_path=home / "state.db")
    ids: dict = {}
    counter = iter(range(1, 1000))

    def session(cwd: str, messages: list[tuple[str, str]], title: str) -> str:
        sid = time.strftime("%Y%m%d_%H%M%S") + f"_{next(counter):06x}"
        db.create_session(sid, "cli", cwd=cwd)
        db.set_session_title(sid, title)
        for role, content in messages:
            db.append_message(sid, role, content)
        return sid

    def called_the_search(sid: str) -> None:
        """An assistant turn that only called this plugin's tool, as Hermes records one: no text,
        the call in ``tool_calls`` (which the FTS tables index too), then the tool's answer."""
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "project_history_search", "arguments": '{"query": "session history"}'},
        }
        db.append_message(sid, "assistant", "", tool_calls=[call])
        db.append_message(sid, "tool", '{"success": true, "results": []}', tool_name="project_history_search")

    folders = {}
    for name in ("shop", "blog"):
        path = work / name
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(path)], check=True)
        folders[name] = str(path)
        with projects_db.connect_closing(home / "projects.db") as conn:
            ids[name] = projects_db.create_project(conn, name=name.title(), folders=[str(path)])
            conn.commit()
    ids["car"] = session(
        folders["shop"],
        [
            ("user", "My car broke down on the motorway yesterday and had to be towed to a garage."),
            ("assistant", "Sorry to hear it. The mechanic will check the engine."),
        ],
        "Car trouble",
    )
    ids["db"] = session(
        folders["shop"],
        [
            ("user", "Which database for orders?"),
            ("assistant", "We decided on PostgreSQL 16 with the orders table partitioned by month."),
        ],
        "Orders database",
    )
    ids["cooking"] = session(
        folders["shop"],
        [("user", "I baked sourdough bread with rye flour this weekend.")],
        "Baking",
    )
    called_the_search(ids["cooking"])
    blog = [("user", "The blog uses PostgreSQL for comments.")]
    ids["blog_session"] = session(folders["blog"], blog, "Blog")
    ids["now"] = session(folders["shop"], [("user", "Let's continue on the shop.")], "Today")
    ids["folders"] = folders
    db.close()
    return ids


def search(session_id: str, mode: str, query: str) -> dict:
    import model_tools

    raw = model_tools.handle_function_call(
        "project_history_search",
        {"query": query, "mode": mode, "limit": 3},
        task_id="fresh-1",
        session_id=session_id,
    )
    return json.loads(raw)


def move(session_id: str, project_id: str) -> dict:
    import model_tools

    raw = model_tools.handle_function_call(
        "project_session_move", {"project_id": project_id}, task_id="fresh-1", session_id=session_id
    )
    return json.loads(raw)


def catalog() -> list:
    import model_tools

    return model_tools.get_tool_definitions(quiet_mode=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        print(json.dumps(make(Path(sys.argv[2]))))
    elif sys.argv[1] == "move":
        print(json.dumps(move(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "catalog":
        print(json.dumps(catalog()))
    else:
        print(json.dumps(search(sys.argv[2], sys.argv[3], " ".join(sys.argv[4:]))))
