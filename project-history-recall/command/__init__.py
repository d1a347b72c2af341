"""``hermes project-history``: the plugin's terminal command.

It is spec §五 step 2's "configuration command": ``setup`` installs and configures an embedding
provider (``setup.py``); the user (or the agent, after the user said yes in chat) runs ``allow``
to record consent; ``status`` shows what is configured, agreed and indexed (``status.py``);
``revoke`` turns semantic search off (``--purge`` deletes the vectors); ``forget`` leaves one
conversation out of everything (``--undo`` brings it back); ``index`` builds the index
now; ``search`` is the agent's search for a person at a terminal (``commands.py``).
``enable``/``disable`` are the old names of ``allow``/``revoke`` and still work; the new names
cannot be mistaken for ``hermes plugins enable/disable`` or ``hermes tools enable/disable``.

Hermes ignores a plugin command's return value, so failures end with ``SystemExit`` and a
non-zero code, and every message names what was wrong, in one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import TYPE_CHECKING

from ..config_schema import MODES

if TYPE_CHECKING:
    from .. import ProcessState

DESCRIPTION = (
    "Search this project's past conversations and manage semantic search.\n"
    "Keyword search works without any of this; semantic search needs `setup` and your consent."
)

#: ``{hermes}``: the program the user runs (``hermes``, or ``hermesx`` for the 0.20 build).
EPILOG = """getting started:
  {hermes} project-history setup local --yes        install a local model (nothing leaves this machine)
  {hermes} project-history allow --all-projects     agree to semantic search (or --project ID)
  {hermes} project-history index --all-projects     build the index, with progress
  {hermes} project-history search how did we fix the login timeout

`allow`/`revoke` record and withdraw your consent; they are not `{hermes} plugins enable/disable`
(which turn the plugin itself on and off). `enable`/`disable` still work as their aliases."""

logger = logging.getLogger(__name__)


def setup_parser(parser: argparse.ArgumentParser) -> None:
    from . import setup

    # Usage lines and the epilog name the program the user typed (Hermes 0.20 names its parser
    # "hermes project-history" when it runs as `hermesx`); set before the subcommands copy it.
    program = _program_name()
    parser.prog = f"{program} project-history"
    parser.epilog = EPILOG.format(hermes=program)
    parser.set_defaults(project_history_help=parser.print_help)
    sub = parser.add_subparsers(dest="project_history_command", metavar="COMMAND")

    setup.add_parser(sub)
    sub.add_parser("status", help="settings in effect, consent, and per-project index coverage")

    enable = sub.add_parser(
        "allow",
        aliases=["enable"],
        help="record your consent to semantic search for projects and turn it on (alias: enable)",
    )
    enable.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="ID",
        help="project id or slug, repo:<path>, or a folder (repeatable); default: this folder's project",
    )
    enable.add_argument("--all-projects", action="store_true", help="agree for every project of this profile")
    enable.add_argument("--yes", action="store_true", help="the user already agreed (e.g. in chat)")

    disable = sub.add_parser(
        "revoke", aliases=["disable"], help="withdraw consent: semantic search off (alias: disable)"
    )
    disable.add_argument("--purge", action="store_true", help="also delete every stored vector")

    forget = sub.add_parser(
        "forget",
        help="leave one conversation out of every search and index, and delete its vectors",
        description="Leave one conversation (its whole compression chain) out of every search and "
        "the index, and delete its stored vectors now. --undo brings it back.",
    )
    forget.add_argument("session", metavar="SESSION_ID", help="any session of the conversation")
    forget.add_argument("--undo", action="store_true", help="make it searchable again")

    uninstall = sub.add_parser(
        "uninstall",
        help="remove consent, vectors, what setup installed and the plugin's settings "
        "(then `plugins remove`)",
    )
    uninstall.add_argument("--yes", action="store_true", help="do it without asking")

    index = sub.add_parser("index", help="build the semantic index now, with a progress bar")
    which = index.add_mutually_exclusive_group()
    which.add_argument("--project", metavar="ID", help="project id or slug, repo:<path>, or a folder")
    which.add_argument("--all-projects", action="store_true")

    search = sub.add_parser(
        "search",
        help="search a project's conversations",
        description="Search a project's conversations. Quotes around the query are optional.",
    )
    search.add_argument("query", nargs="+", help="words of the query (no quotes needed)")
    search.add_argument("--mode", choices=MODES, default="hybrid")
    search.add_argument("--limit", type=int, default=3, help="sessions to show, 1 to 10 (default 3)")
    where = search.add_mutually_exclusive_group()
    where.add_argument("--cwd", metavar="DIR", help="search as a conversation in DIR (default: here)")
    where.add_argument("--session", metavar="ID", help="search as this conversation")
    search.add_argument("--since", metavar="WHEN", help="from a date (2026-11-20) or a span ago (7d, 2w)")
    search.add_argument("--until", metavar="WHEN", help="before a date (that day included) or a span ago")
    search.add_argument(
        "--all-projects",
        action="store_true",
        help="this project first, then Home's conversations, then other projects'",
    )
    search.add_argument("--json", action="store_true", help="print the tool's JSON result")


def _program_name() -> str:
    """``hermes`` or ``hermesx``: the running console script when it is one of Hermes's (cheap:
    no import; ``store.hermes_program`` asks the installed entry points when it is not)."""
    ran = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "").removesuffix(".exe")
    return ran if re.fullmatch(r"hermes[a-z0-9_-]*", ran) else "hermes"


def run(process: ProcessState, args: argparse.Namespace) -> int:
    from ..store import hermes_program
    from . import commands, setup, status
    from .common import CommandError, describe

    handlers = {
        "setup": lambda: setup.run(process, args),
        "status": lambda: status.run(process),
        "allow": lambda: commands.allow(process, args),
        "enable": lambda: commands.allow(process, args),
        "revoke": lambda: commands.revoke(process, args),
        "disable": lambda: commands.revoke(process, args),
        "index": lambda: commands.index(process, args),
        "forget": lambda: commands.forget(process, args),
        "uninstall": lambda: commands.uninstall(process, args),
        "search": lambda: commands.search(process, args),
    }
    handler = handlers.get(getattr(args, "project_history_command", None) or "")
    if handler is None:  # bare `hermes project-history`: full help, as Hermes's own commands do
        print_help = getattr(args, "project_history_help", None)
        if print_help is not None:
            print_help()
        else:
            names = "setup,status,allow,revoke,forget,index,search"
            print(f"usage: {hermes_program()} project-history {{{names}}} ...")
        return 0
    name = f"{hermes_program()} project-history"  # how the user's messages are signed
    try:
        code = handler() or 0
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except (CommandError, setup.SetupError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        code = 2
    except BrokenPipeError:  # `... | head -1`: the reader has gone; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except KeyboardInterrupt:
        code = 130
    except Exception as error:  # one line for the user; the traceback goes to the log once
        logger.warning("%s %s failed", name, args.project_history_command, exc_info=True)
        print(f"{name}: {describe(error)}", file=sys.stderr)
        code = 1
    if code:
        raise SystemExit(code)
    return 0
