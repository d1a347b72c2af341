"""``hermes project-history``: the plugin's terminal command.

It is spec §五 step 2's "configuration command": ``setup`` installs and configures an embedding
provider (``setup_cmd.py``); the user (or the agent, after the user said yes in chat) runs
``allow`` to record consent; ``status`` shows what is configured, agreed and indexed; ``revoke``
turns semantic search off (``--purge`` deletes the vectors); ``index`` builds the index now;
``search`` is the agent's search for a person at a terminal. ``enable``/``disable`` are the old
names of ``allow``/``revoke`` and still work; the new names cannot be mistaken for
``hermes plugins enable/disable`` or ``hermes tools enable/disable``.

Hermes ignores a plugin command's return value, so failures end with ``SystemExit`` and a
non-zero code, and every message names what was wrong.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .handlers import MODES

DESCRIPTION = (
    "Search this project's past conversations and manage semantic search.\n"
    "Keyword search works without any of this; semantic search needs `setup` and your consent."
)

EPILOG = """getting started:
  hermes project-history setup local --yes        install a local model (nothing leaves this machine)
  hermes project-history allow --all-projects     agree to semantic search (or --project ID)
  hermes project-history index --all-projects     build the index, with progress
  hermes project-history search how did we fix the login timeout

`allow`/`revoke` record and withdraw your consent; they are not `hermes plugins enable/disable`
(which turn the plugin itself on and off). `enable`/`disable` still work as their aliases."""

_PARSER: argparse.ArgumentParser | None = None
logger = logging.getLogger(__name__)

DISABLE_WAIT_SECONDS = 60.0  # longest a running indexer's one request can take (timeout_seconds 20, x3)
INDEX_WAIT_SECONDS = 3600.0  # `index` waits for another indexer rather than failing


class CommandError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code 2."""


def setup_parser(parser: argparse.ArgumentParser) -> None:
    global _PARSER
    _PARSER = parser
    parser.epilog = EPILOG
    sub = parser.add_subparsers(dest="project_history_command", metavar="COMMAND")

    from . import setup_cmd

    setup_cmd.add_parser(sub)
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
    search.add_argument("--json", action="store_true", help="print the tool's JSON result")


def run(args: argparse.Namespace) -> int:
    from . import setup_cmd

    handlers = {
        "setup": setup_cmd.run,
        "status": _status,
        "allow": _enable,
        "enable": _enable,
        "revoke": _disable,
        "disable": _disable,
        "index": _index,
        "search": _search,
    }
    handler = handlers.get(getattr(args, "project_history_command", None) or "")
    if handler is None:  # bare `hermes project-history`: full help, as Hermes's own commands do
        if _PARSER is not None:
            _PARSER.print_help()
        else:
            print("usage: hermes project-history {setup,status,allow,revoke,index,search} ...")
        return 0
    try:
        code = handler(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except (CommandError, setup_cmd.SetupError) as error:
        print(f"hermes project-history: {error}", file=sys.stderr)
        code = 2
    except BrokenPipeError:  # `... | head -1`: the reader has gone; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except KeyboardInterrupt:
        code = 130
    except Exception as error:  # one line for the user; the traceback goes to the log once
        logger.warning("hermes project-history %s failed", args.project_history_command, exc_info=True)
        print(f"hermes project-history: {_describe(error)}", file=sys.stderr)
        code = 1
    if code:
        raise SystemExit(code)
    return 0


# --------------------------------------------------------------------------- helpers


def _describe(error: BaseException) -> str:
    from .hermes_env import HermesEnv
    from .semantic import describe_failure

    return describe_failure(error, HermesEnv.current())


@contextmanager
def _opened() -> Iterator[tuple[Any, Any, Any]]:
    """(env, HermesDB, ProjectMap) for one command, or a one-line error when there are no sessions."""
    from .hermes_db import HermesDB, NoSessionDatabase
    from .hermes_env import HermesEnv
    from .scope import ProjectMap

    env = HermesEnv.current()
    try:
        db = HermesDB.open(env)
    except NoSessionDatabase:
        raise CommandError(f"no session database in {env.home} yet: chat with Hermes first") from None
    with db:
        yield env, db, ProjectMap(db)


def _identity_for(token: str, db: Any, projects: Any) -> dict[str, Any]:
    """A project named on the command line: id/slug, ``repo:<path>``, or a folder inside one."""
    from . import attribution

    token = token.strip()
    if not token:
        raise CommandError("an empty project name was given")
    if token.startswith("repo:"):
        from .git_roots import PROBE

        key = attribution.path_key(PROBE.real(token[len("repo:") :]))
        if not key:
            raise CommandError(f"not a repository path: {token!r}")
        return {"kind": "auto", "key": key}
    project = db.project(token)
    if project is not None:
        return {"kind": "explicit", "id": project["id"], "name": project["name"]}
    if os.path.isdir(token):
        return _identity_of_folder(os.path.abspath(token), projects)
    raise CommandError(f"project not found: {token} (use a project id or slug, repo:<path>, or a folder)")


def _identity_of_folder(folder: str, projects: Any) -> dict[str, Any]:
    identity = projects.identity_of_folder(folder)
    if identity["kind"] == "home":
        raise CommandError(
            f"{folder} is in no project or git repository; pass --project ID or --all-projects"
        )
    return identity


def _label(identity: dict[str, Any]) -> str:
    if identity.get("kind") == "explicit":
        return f"{identity.get('name')} ({identity.get('id')})"
    if identity.get("kind") == "auto":
        return f"repository {identity.get('key')}"
    return "Home"


def _save_plugin_settings(values: dict[str, Any]) -> None:
    from hermes_cli.config import save_config

    from .config_schema import PLUGIN_KEY

    save_config({"plugins": {PLUGIN_KEY: {"embedding": values}}}, merge_existing=True)


def _embedder(env: Any) -> Any:
    """The configured provider, its runtime checked first; raises what ``_describe`` explains."""
    from .semantic import embedder_for

    return embedder_for(env)


# --------------------------------------------------------------------------- status


def _status(args: argparse.Namespace) -> int:
    from . import runtime, semantic
    from .config_schema import API_KEY_ENV, endpoint_of
    from .consent import read_consent, semantic_gate
    from .hermes_db import HermesDB, NoSessionDatabase
    from .hermes_env import HermesEnv
    from .scope import ProjectMap

    env = HermesEnv.current()
    settings = env.settings
    embedding = settings.embedding
    consent = read_consent(env)
    print("Semantic search settings (plugins.project-history-recall.embedding):")
    print(f"  enabled: {str(embedding.enabled).lower()}")
    print(f"  provider: {embedding.provider}   model: {embedding.model}")
    print(f"  endpoint: {endpoint_of(embedding)}")
    print(
        f"  chunk_size: {embedding.chunk_size}  chunk_overlap: {embedding.chunk_overlap}  "
        f"top_k: {embedding.top_k}  rrf_k: {embedding.rrf_k}  "
        f"weights: keyword {embedding.keyword_weight} / semantic {embedding.semantic_weight}"
    )
    api_key = env.api_key()
    print(f"  API key ({API_KEY_ENV}): {'set' if api_key else 'not set'}")
    for problem in settings.problems:
        print(f"  ! {problem}")
    problem = runtime.provider_problem(embedding, api_key, settings.problems)
    runtime_folder = runtime.runtime_dir()
    if runtime_folder.is_dir():
        print(f"  packages installed by setup: {runtime_folder}")
    if problem:
        print(f"  ! semantic search cannot work: {problem}; run {runtime.setup_hint(embedding.provider)}")
    if consent:
        projects = ", ".join(consent.get("projects") or []) or "none"
        if consent.get("disabled_at"):
            when = f"revoked {consent.get('disabled_at')} (given {consent.get('confirmed_at')})"
        else:
            when = f"given {consent.get('confirmed_at')}"
        print(
            f"Consent {when}: {consent.get('provider')} "
            f"{consent.get('model')} at {consent.get('endpoint')}; projects: {projects}"
        )
    else:
        print("Consent: none recorded (semantic search sends nothing until `allow`)")

    try:
        db = HermesDB.open(env)
    except NoSessionDatabase:
        print("No session database yet.")
        return 0
    failure = (
        f"{problem}; run {runtime.setup_hint(embedding.provider)}" if embedding.enabled and problem else None
    )
    with db:
        groups = ProjectMap(db).groups()
        indexed: list[Any] = ["n/a"] * len(groups)
        if embedding.enabled and not problem:
            try:
                fingerprint = _embedder(env).fingerprint
                indexed = semantic.index_report(env, db, fingerprint, groups)
            except Exception as error:
                logger.warning("semantic index status unavailable", exc_info=True)
                failure = semantic.describe_failure(error, env)
        print("Projects:")
        if not groups:
            print("  (no conversations belong to a project yet)")
        for group, count in zip(groups, indexed, strict=True):
            gate = semantic_gate(embedding, consent, group["identity"], env.profile)
            messages = len(db.live_message_ids(group["session_ids"]))
            print(
                f"  {_label(group['identity'])}: {len(group['session_ids'])} sessions, "
                f"{messages} messages, {count} indexed; semantic: {gate}"
            )
    if failure:
        raise CommandError(f"semantic search unavailable: {failure}")
    return 0


# --------------------------------------------------------------------------- allow / revoke


def _enable(args: argparse.Namespace) -> int:
    from . import runtime
    from .consent import (
        ALL_PROJECTS,
        WHAT_IS_SENT,
        consent_record,
        destination,
        project_ref,
        same_target,
        update_consent,
    )

    if args.all_projects and args.project:
        raise CommandError("use either --project or --all-projects, not both")
    with _opened() as (env, db, projects):
        if args.all_projects:
            refs, labels = [ALL_PROJECTS], ["every project of this profile"]
        else:
            identities = [_identity_for(t, db, projects) for t in args.project] or [
                _identity_of_folder(os.getcwd(), projects)
            ]
            refs, labels = [project_ref(i) for i in identities], [_label(i) for i in identities]

    settings = env.settings
    embedding = settings.embedding
    problem = runtime.provider_problem(embedding, env.api_key(), settings.problems)
    if problem:
        raise CommandError(
            f"semantic search cannot work yet ({problem}); run {runtime.setup_hint(embedding.provider)}"
        )
    print(f"Semantic search will send {WHAT_IS_SENT}")
    print(f"  of: {'; '.join(labels)}")
    print("  what: past conversations now, and new messages as they are searched (history+incremental)")
    print(f"  to: {embedding.provider} model '{embedding.model}' at {destination(embedding)}")
    print(f"  stored: vectors only, in {env.index_path}")
    if not args.yes:
        if not sys.stdin or not sys.stdin.isatty():
            raise CommandError("confirmation needed: run again with --yes once the user has agreed")
        if input("Agree and enable? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing changed.")
            return 1

    def agree(consent: dict[str, Any] | None) -> dict[str, Any]:
        agreed = refs
        if same_target(consent, embedding, env.profile) and not consent.get("disabled_at"):
            agreed = [*consent.get("projects", []), *refs]
        return consent_record(embedding, env.profile, agreed, time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    update_consent(env, agree)
    _save_plugin_settings({"enabled": True})
    print(f"Allowed. Consent recorded in {env.consent_path}")
    scope = " --all-projects" if args.all_projects else ""
    print(f"Build the index now: hermes project-history index{scope}")
    return 0


def _disable(args: argparse.Namespace) -> int:
    from .consent import update_consent
    from .hermes_env import HermesEnv
    from .index_db import indexer_lock, purge

    env = HermesEnv.current()
    _save_plugin_settings({"enabled": False})

    def revoke(consent: dict[str, Any] | None) -> dict[str, Any] | None:
        if not consent or consent.get("disabled_at"):
            return None
        return {**consent, "disabled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    update_consent(env, revoke)
    # Every indexer re-checks consent before each batch; waiting for the lock means one that was
    # mid-request has finished it and stopped, so nothing at all is sent once this returns.
    with indexer_lock(env.data_dir, DISABLE_WAIT_SECONDS) as taken:
        if not taken:
            raise CommandError(
                f"semantic search is off, but an indexer did not stop within {DISABLE_WAIT_SECONDS:.0f}s "
                "(a request to the provider is hanging); it sends nothing more once that request ends"
            )
        print("Consent revoked: semantic search is off; nothing is sent to any embedding provider.")
        if args.purge:
            removed = purge(env.index_path)
            print("Stored vectors deleted." if removed else "No stored vectors to delete.")
    return 0


# --------------------------------------------------------------------------- index


def _index(args: argparse.Namespace) -> int:
    from .consent import read_consent, semantic_gate
    from .embedders import EmbeddingUnavailable
    from .index_db import indexer_busy
    from .index_progress import IndexProgress
    from .indexer import index_scope

    with _opened() as (env, db, projects):
        groups = projects.groups()
        if args.all_projects:
            chosen = groups
        else:
            identity = (
                _identity_for(args.project, db, projects)
                if args.project
                else _identity_of_folder(os.getcwd(), projects)
            )
            chosen = [g for g in groups if g["identity"] == identity] or [
                {"identity": identity, "session_ids": []}
            ]
    consent = read_consent(env)
    refused = [
        g
        for g in chosen
        if semantic_gate(env.settings.embedding, consent, g["identity"], env.profile) != "ok"
    ]
    if refused:
        names = ", ".join(_label(g["identity"]) for g in refused)
        raise CommandError(
            f"semantic search is not enabled for {names}; run `hermes project-history allow` first"
        )
    embedder = _embedder(env)
    if indexer_busy(env.data_dir):
        print("Another process is indexing; waiting for it to finish...", file=sys.stderr)

    total_written, started = 0, time.monotonic()
    with IndexProgress() as progress:
        for group in chosen:
            counting = progress.track(_label(group["identity"]), embedder)
            try:
                written, complete = index_scope(
                    env,
                    group["identity"],
                    group["session_ids"],
                    counting,
                    progress=counting.report,
                    lock_wait=INDEX_WAIT_SECONDS,
                )
            except EmbeddingUnavailable as error:
                raise CommandError(f"embedding provider unavailable: {error}") from None
            if not complete:
                raise CommandError(
                    "indexing stopped before the end (semantic search was turned off, or another "
                    "process kept the index busy); run `hermes project-history status`"
                )
            total_written += written
    seconds = time.monotonic() - started
    print(
        f"Indexed {len(chosen)} project(s): {total_written} chunks embedded in {seconds:.1f}s "
        f"({embedder.texts_embedded} texts sent to the provider)."
    )
    return 0


# --------------------------------------------------------------------------- search


def _search(args: argparse.Namespace) -> int:
    from . import search

    query = " ".join(args.query)
    if not query.strip():
        raise CommandError("the query is empty")
    if not 1 <= args.limit <= 10:
        raise CommandError("--limit must be from 1 to 10")
    cwd = os.path.abspath(args.cwd) if args.cwd else os.getcwd()
    if args.cwd and not os.path.isdir(cwd):
        raise CommandError(f"no such folder: {args.cwd}")
    if args.session is not None:
        with _opened() as (_env, db, _projects):
            if not args.session.strip() or db.session(args.session.strip()) is None:
                raise CommandError(f"session not found: {args.session}")
    # build_index=False: a terminal search never starts indexing it would abandon on exit.
    result = search.run_search(query, args.mode, args.limit, args.session or "", cwd, build_index=False)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0 if result.get("success") else 1
    if not result.get("success"):
        raise CommandError(result.get("error", "search failed"))
    print(_readable(result))
    if result.get("semantic_error"):
        print(
            f"hermes project-history: semantic search unavailable: {result['semantic_error']}",
            file=sys.stderr,
        )
        return 1 if args.mode != "keyword" else 0
    return 0


def _readable(result: dict[str, Any]) -> str:
    lines = []
    if result.get("project"):
        lines.append(
            f"Project: {_label(result['project'])}  ·  {result.get('sessions_in_scope')} sessions  ·  "
            f"semantic: {result.get('semantic_status')}"
        )
    if result.get("message"):
        lines.append(result["message"])
    for number, hit in enumerate(result.get("results", []), start=1):
        lines.append(f"{number}. {hit.get('title') or '(untitled)'}  [{hit['when']}]  {hit['link']}")
        lines.append(f"   {hit['snippet']}")
        lines.append(f"   found by: {hit['score_source']}, message {hit['message_id']}")
    consent = result.get("semantic_consent")
    if consent:
        lines.append(f"Semantic search needs consent: {consent['on_yes_run']}")
    elif result.get("mode") != "keyword" and result.get("semantic_status") in ("partial", "indexing"):
        lines.append(
            "Semantic search skipped: this project's index is not complete (results above are "
            "keyword matches). Build it with: hermes project-history index"
        )
    return "\n".join(lines)
