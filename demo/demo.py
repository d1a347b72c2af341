"""``make demo``: the plugin at work inside a real Hermes, start to finish, offline.

A throw-away HERMES_HOME gets the plugin installed and enabled as a user would; two projects get a
few conversations through Hermes's own SessionDB and projects_db. Then, as the agent would, the
demo calls the tools through ``model_tools.handle_function_call``, walks through the consent chain
with the in-process MiniLM model (nothing leaves the machine), moves a conversation, and shows the
``hermes project-history`` command a person uses at a terminal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
ROOT = Path(tempfile.mkdtemp(prefix="project-history-demo-"))
HOME = ROOT / "hermes-home"
HOME.mkdir()

from harness import VENV_BIN, World, enable_plugin, run_hermes  # noqa: E402
from models import minilm_model_dir  # noqa: E402

os.environ["HERMES_HOME"] = str(HOME)  # before Hermes is imported: it freezes some paths


def say(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m")


def show(data: dict) -> None:
    text = json.dumps(data, ensure_ascii=False, indent=2)
    print(textwrap.indent(text if len(text) < 2400 else text[:2400] + "\n...", "   "))


def hermes(*args: str, cwd: Path | None = None) -> str:
    """Run the real CLI and print it as a command that works when pasted (after the export the
    demo prints at the end)."""
    done = run_hermes(HOME, *args, cwd=cwd)
    output = (done.stdout + done.stderr).strip()
    command = shlex.join(["hermes", *args])
    if cwd is not None:
        command = f"cd {shlex.quote(str(cwd))} && {command}"
    print(textwrap.indent(f"$ {command}\n{output}", "   "))
    if done.returncode != 0:
        raise SystemExit(f"demo failed: {command} exited {done.returncode}")
    return output


def main() -> None:
    say("Install: copy the plugin into $HERMES_HOME/plugins and enable it")
    enable_plugin(HOME)
    listing = run_hermes(HOME, "tools", "list").stdout
    print("   " + next(line.strip() for line in listing.splitlines() if "project_history" in line))
    import model_tools  # noqa: F401  (Hermes discovers and loads the plugin here)

    world = World(HOME, ROOT / "code")
    say("Two projects with history (made with Hermes's SessionDB and projects_db)")
    shop = world.folder("shop", git=True)
    blog = world.folder("blog", git=True)
    shop_id = world.project("Shop", shop)
    blog_id = world.project("Blog", blog)
    world.session(
        shop,
        [
            ("user", "Customers get logged out while paying. The login session expires after five minutes."),
            ("assistant", "I raised the session lifetime to 30 minutes and added a sliding refresh."),
        ],
        title="Checkout logout",
    )
    world.session(
        shop,
        [
            ("user", "Which database for orders?"),
            ("assistant", "We decided on PostgreSQL 16 with the orders table partitioned by month."),
        ],
        title="Orders database",
    )
    world.session(blog, [("user", "The blog also uses PostgreSQL, for comments.")], title="Blog comments")
    now = world.session(shop, [("user", "Let's continue on the shop.")], title="Today")
    print(f"   Shop = {shop_id} ({shop}), Blog = {blog_id} ({blog}); current session {now} in Shop")

    say("Agent: project_history_search('PostgreSQL', mode='keyword') - only Shop's other sessions")
    show(world.search(now, "PostgreSQL", mode="keyword"))

    say("Agent: hybrid search before consent - keyword results, and what to ask the user")
    configure = [
        ("provider", "local"),
        ("model", "all-MiniLM-L6-v2"),
        ("model_path", str(minilm_model_dir())),
    ]
    for key, value in configure:
        hermes("config", "set", f"plugins.project-history-recall.embedding.{key}", value, "--force")
    before = world.search(now, "how did we handle the login timeout", mode="hybrid")
    show(before)

    say("User said yes in chat; the agent runs the command the result gave")
    hermes(*before["semantic_consent"]["on_yes_run"].split()[1:])

    say("Agent: the same hybrid search - now found by meaning ('login timeout' ~ 'session expires')")
    show(world.search(now, "how did we handle the login timeout", mode="hybrid", limit=2))

    say("Agent: project_session_move to Blog - the cwd changes through SessionDB.update_session_cwd")
    show(world.move(now, blog_id))
    print(f"   state.db now records cwd = {world.row(now)['cwd']}")
    show(world.search(now, "PostgreSQL", mode="keyword"))

    say("A person at a terminal")
    hermes("project-history")
    hermes("project-history", "status")
    hermes("project-history", "index", cwd=Path(shop))
    hermes("project-history", "search", "login", "timeout", "--mode", "hybrid", cwd=Path(shop))
    world.close()
    print("\nDone. The demo's Hermes home is kept so the commands above work when pasted after this")
    print("(it points Hermes at that home and puts this virtualenv's `hermes` on PATH):")
    print(f'   export HERMES_HOME={shlex.quote(str(HOME))} PATH={shlex.quote(str(VENV_BIN))}:"$PATH"')
    print(f"Remove it afterwards with: rm -rf {shlex.quote(str(ROOT))}")


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as error:
        sys.exit(f"demo failed: {error}")
