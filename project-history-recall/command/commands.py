"""``allow``, ``revoke``, ``forget``, ``index`` and ``search``: the consent chain and the index for
a person at a terminal (spec §五), and the agent's search in readable form."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..store import command_line, hermes_program, hint
from ..text import without_controls
from ..text.clean import CONTROL_CHARACTERS
from .common import (
    CommandError,
    confirmed,
    counted,
    identity_for,
    identity_of_folder,
    label,
    opened,
    save_plugin_settings,
)

if TYPE_CHECKING:
    from .. import ProcessState
    from ..store import HermesEnv

DISABLE_WAIT_SECONDS = 60.0  # longest a running indexer's one request can take (timeout_seconds 20, x3)
INDEX_WAIT_SECONDS = 3600.0  # `index` waits for another indexer rather than failing


# --------------------------------------------------------------------------- allow / revoke


def allow(process: ProcessState, args: argparse.Namespace) -> int:
    return grant(process, args.project, args.all_projects, args.yes)


def grant(process: ProcessState, tokens: list[str], all_projects: bool, yes: bool) -> int:
    """Record consent for these projects (``tokens``: ids, slugs, repo keys or folders; none: the
    current folder's project) or for every project, after showing what will be sent where."""
    from ..semantic import (
        ALL_PROJECTS,
        WHAT_IS_SENT,
        consent_record,
        destination,
        project_ref,
        runtime,
        same_target,
        update_consent,
    )
    from ..store import HermesEnv

    if all_projects and tokens:
        raise CommandError("use either --project or --all-projects, not both")
    covers: dict[str, list[str]] = {}
    if all_projects:  # needs no session yet: a fresh Hermes can agree before its first chat
        env = HermesEnv.current()
        refs, labels = [ALL_PROJECTS], ["every project of this profile"]
    else:
        with opened(process) as (env, db, projects):
            identities = [identity_for(t, db, projects) for t in tokens] or [
                identity_of_folder(os.getcwd(), projects)
            ]
            refs, labels = [project_ref(i) for i in identities], [label(i) for i in identities]
            # What the consent covers: each project's folders now (a project that grows asks again).
            covers = {project_ref(i): projects.folders_of(i) for i in identities}

    settings = env.settings
    embedding = settings.embedding
    problem = runtime.provider_problem(embedding, env.api_key(), settings.problems)
    if problem:
        raise CommandError(
            f"semantic search cannot work yet ({problem}); "
            f"run {runtime.setup_hint(embedding.provider, settings.provider_chosen)}"
        )
    print(f"Semantic search will send {WHAT_IS_SENT}")
    print(f"  of: {'; '.join(labels)}")
    print("  what: past conversations now, and new messages as they are searched (history+incremental)")
    print(f"  to: {embedding.provider} model '{embedding.model}' at {destination(embedding)}")
    print(f"  stored: vectors only, in {env.index_path}")
    if not yes and not confirmed(
        "Agree and enable?", "confirmation needed: run again with --yes once the user has agreed"
    ):
        return 1

    def agree(consent: dict[str, Any] | None) -> dict[str, Any]:
        agreed, covered = refs, covers
        if consent and same_target(consent, embedding, env.profile) and not consent.get("disabled_at"):
            agreed = [*consent.get("projects", []), *refs]
            covered = {**consent.get("covers", {}), **covers}
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        return consent_record(embedding, env.profile, agreed, when, covered)

    update_consent(env, agree)
    save_plugin_settings({"enabled": True})
    print(f"Allowed. Consent recorded in {env.consent_path}")
    # The hint runs from any folder: it names the projects that were not the current folder's.
    chosen = [["--all-projects"]] if all_projects else [["--project", t] for t in tokens] or [[]]
    for index_args in chosen:
        print(f"Build the index now: {command_line('project-history', 'index', *index_args)}")
    return 0


def _withdrawn(consent: dict[str, Any] | None) -> dict[str, Any] | None:
    """The consent marked as withdrawn now (None: nothing to change)."""
    if not consent or consent.get("disabled_at"):
        return None
    return {**consent, "disabled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


@contextmanager
def _switched_off(env: HermesEnv, busy: str) -> Iterator[None]:
    """Semantic search off and consent withdrawn, then the indexer lock held for the block.

    Every indexer re-checks consent before each batch; waiting for the lock means one that was
    mid-request has finished it and stopped, so nothing at all is sent once the block runs.
    ``busy``: the error when an indexer does not stop within :data:`DISABLE_WAIT_SECONDS`."""
    from ..semantic import indexer_lock, update_consent

    save_plugin_settings({"enabled": False})
    update_consent(env, _withdrawn)
    with indexer_lock(env.data_dir, DISABLE_WAIT_SECONDS) as taken:
        if not taken:
            raise CommandError(busy)
        yield


def revoke(process: ProcessState, args: argparse.Namespace) -> int:
    from ..semantic import purge
    from ..store import HermesEnv

    env = HermesEnv.current()
    busy = (
        f"semantic search is off, but an indexer did not stop within {DISABLE_WAIT_SECONDS:.0f}s "
        "(a request to the provider is hanging); it sends nothing more once that request ends"
    )
    with _switched_off(env, busy):
        print("Consent revoked: semantic search is off; nothing is sent to any embedding provider.")
        if args.purge:
            removed = purge(env.index_path)
            print("Stored vectors deleted." if removed else "No stored vectors to delete.")
    return 0


# --------------------------------------------------------------------------- forget


def forget(process: ProcessState, args: argparse.Namespace) -> int:
    """Leave one conversation (its whole compression chain) out of every search and index, and
    delete its vectors now; ``--undo`` brings it back (issue 32; docs/design.md, "Forgetting one
    conversation"). A session in no project can be forgotten too: the user asked, and it would
    be forgotten should it be moved into one."""
    from ..projects.forgotten import forget as record
    from ..projects.forgotten import remember
    from ..semantic import delete_sessions, indexer_lock

    wanted = args.session.strip()
    listing = command_line("sessions", "list")
    if not wanted:
        raise CommandError(f"give the id of the conversation to forget ({listing} shows them)")
    if args.undo:
        return _undo(process, wanted, listing, remember)
    with opened(process) as (env, db, projects):
        if db.session(wanted) is None:
            raise CommandError(f"session not found: {wanted} ({listing} shows the ids)")
        chain = projects.conversation(wanted)
    recorded = record(env.data_dir, chain, wanted)
    undo = command_line("project-history", "forget", "--undo", wanted)
    busy = (
        "recorded as forgotten (no search returns it), but an indexer did not stop within "
        f"{DISABLE_WAIT_SECONDS:.0f}s: run this again to delete its stored vectors"
    )
    # Recorded first, then the indexer lock: an indexer that was running stops with the batch it
    # had, every later one leaves the conversation out, and what it wrote is deleted here.
    with indexer_lock(env.data_dir, DISABLE_WAIT_SECONDS) as taken:
        if not taken:
            raise CommandError(busy)
        deleted = delete_sessions(env.index_path, chain)
    sessions = f" ({counted(len(chain), 'session')} of one compressed chain)" if len(chain) > 1 else ""
    print(
        f"{'Forgotten' if recorded else 'Already forgotten'}: {wanted}{sessions}. No search returns it "
        f"and it is never indexed; {counted(deleted, 'stored vector')} deleted. Undo: {undo}"
    )
    return 0


def _undo(process: ProcessState, wanted: str, listing: str, remember: Any) -> int:
    from ..store import HermesDB, HermesEnv, NoSessionDatabase

    env = HermesEnv.current()
    chain = [wanted]
    known = False
    try:
        with HermesDB.open(env, process.schemas) as db:
            known = db.session(wanted) is not None
            if known:
                from ..projects import ProjectMap

                chain = ProjectMap(db, process.projects).conversation(wanted)
    except NoSessionDatabase:
        pass
    if remember(env.data_dir, [wanted, *chain]):
        print(
            f"Remembered: {wanted} is searchable again (keyword now; semantic after the next index: "
            f"{command_line('project-history', 'index')})."
        )
        return 0
    if not known:
        raise CommandError(f"session not found: {wanted} ({listing} shows the ids)")
    print(f"{wanted} was not forgotten: nothing to undo.")
    return 0


# --------------------------------------------------------------------------- uninstall

#: What the plugin keeps in its own folder, besides its code (``hermes plugins remove`` deletes
#: the folder whole; ``uninstall`` removes these for a plugin folder that stays).
DATA_FILES = (
    "consent.json",
    "consent.lock",
    "forgotten.json",
    "forgotten.lock",
    "indexer.lock",
    "git_roots.db",
    "model-identity.json",
)


def uninstall(process: ProcessState, args: argparse.Namespace) -> int:
    """Everything the plugin added outside its code: consent (and running indexers stopped), the
    vectors, what ``setup`` installed, its settings and key, its entries in Hermes's plugin lists.
    What stays is the plugin's folder, for ``hermes plugins remove``."""
    import shutil

    from ..semantic import purge, runtime
    from ..store import HermesEnv

    env = HermesEnv.current()
    installed = runtime.data_dir()
    print("This removes, for this profile:")
    print(f"  consent and stored vectors: {env.data_dir}")
    print(f"  what setup installed: {installed}")
    print("  plugins.project-history-recall and its entries in config.yaml; the API key in .env")
    if not args.yes and not confirmed("Go ahead?", "confirmation needed: run again with --yes"):
        return 1
    busy = f"an indexer did not stop within {DISABLE_WAIT_SECONDS:.0f}s; run this again later"
    with _switched_off(env, busy):  # as revoke: off first, so a running indexer stops
        purge(env.index_path)
        for name in (*DATA_FILES, "embeddings.db"):
            for suffix in ("", "-wal", "-shm", "-journal"):
                (env.data_dir / f"{name}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(installed, ignore_errors=True)
    _forget_settings()
    print("Done. Last step, which deletes the plugin's folder:")
    print(f"  {command_line('plugins', 'remove', 'project-history-recall')}")
    return 0


#: Where Hermes lists toolsets per platform once the user has saved a choice (``hermes tools
#: disable/enable``): the toolset left there after the plugin is gone makes every later chat
#: print "Unknown toolsets: project_history" (Hermes 0.19 to 0.22).
TOOLSET_LISTS = ("platform_toolsets", "known_plugin_toolsets")


def _forget_settings() -> None:
    """The plugin's sections and list entries out of config.yaml (its plugin entries and its
    toolset in every platform's lists), its key out of .env, with Hermes's own readers and
    writers (as ``hermes config unset`` does)."""
    from hermes_cli.config import get_config_path, remove_env_value
    from utils import atomic_yaml_write, fast_safe_load

    from ..config_schema import API_KEY_ENV

    path = get_config_path()
    if path.exists():
        with open(path, encoding="utf-8") as handle:
            config = fast_safe_load(handle) or {}
        if isinstance(config, dict) and without_the_plugin(config):
            atomic_yaml_write(path, config, sort_keys=False)
    remove_env_value(API_KEY_ENV)


def without_the_plugin(config: dict[str, Any]) -> bool:
    """Remove the plugin's entries from a parsed config.yaml in place; True if any was there."""
    from ..config_schema import PLUGIN_KEY, TOOLSET

    changed = False
    plugins = config.get("plugins")
    if isinstance(plugins, dict):
        changed |= plugins.pop(PLUGIN_KEY, None) is not None
        entries = plugins.get("entries")
        if isinstance(entries, dict):
            changed |= entries.pop(PLUGIN_KEY, None) is not None
        for listed in ("enabled", "disabled"):
            if isinstance(plugins.get(listed), list) and PLUGIN_KEY in plugins[listed]:
                plugins[listed] = [name for name in plugins[listed] if name != PLUGIN_KEY]
                changed = True
    for section in TOOLSET_LISTS:
        platforms = config.get(section)
        if not isinstance(platforms, dict):
            continue
        for platform, names in platforms.items():
            if isinstance(names, list) and TOOLSET in names:
                platforms[platform] = [name for name in names if name != TOOLSET]
                changed = True
    return changed


# --------------------------------------------------------------------------- index


def index(process: ProcessState, args: argparse.Namespace) -> int:
    from ..attribution import same_project
    from ..semantic import EmbeddingUnavailable, Semantic, indexer_busy
    from .progress import IndexProgress

    with opened(process) as (env, db, projects):
        groups = projects.groups()
        if args.all_projects:
            chosen = groups
        else:
            identity = (
                identity_for(args.project, db, projects)
                if args.project
                else identity_of_folder(os.getcwd(), projects)
            )
            chosen = [g for g in groups if same_project(g["identity"], identity)] or [
                {"identity": identity, "session_ids": [], "folders": projects.folders_of(identity)}
            ]
    semantic = Semantic(env, process.semantic, process.schemas)
    refused = [g for g in chosen if semantic.gate(g["identity"], g["folders"]) != "ok"]
    if refused:
        names = ", ".join(label(g["identity"]) for g in refused)
        raise CommandError(
            f"semantic search is not enabled for {names}; run {hint('project-history', 'allow')} first"
        )
    embedder = semantic.embedder()
    if indexer_busy(env.data_dir):
        print("Another process is indexing; waiting for it to finish...", file=sys.stderr)

    total_written, started = 0, time.monotonic()
    with IndexProgress() as progress:
        pacing = semantic.pacing()  # what one project taught about the endpoint serves the next
        for group in chosen:
            counting = progress.track(label(group["identity"]), embedder)
            try:
                written, complete = semantic.index(
                    group["identity"],
                    group["session_ids"],
                    counting,
                    progress=counting.report,
                    lock_wait=INDEX_WAIT_SECONDS,
                    folders=group["folders"],
                    pacing=pacing,
                )
            except EmbeddingUnavailable as error:
                raise CommandError(f"embedding provider unavailable: {error}") from None
            if not complete:
                raise CommandError(
                    "indexing stopped before the end (semantic search was turned off, or another "
                    f"process kept the index busy); run {hint('project-history', 'status')}"
                )
            total_written += written
    seconds = time.monotonic() - started
    projects = counted(len(chosen), "project")
    if not total_written:
        print(f"Indexed {projects}: already up to date, nothing to embed.")
        return 0
    where = (
        "embedded on this machine"
        if env.settings.embedding.provider == "local"
        else f"sent to {env.settings.embedding.provider}"
    )
    print(
        f"Indexed {projects}: {counted(total_written, 'chunk')} embedded in {seconds:.1f}s "
        f"({counted(embedder.texts_embedded, 'text')} {where})."
    )
    return 0


# --------------------------------------------------------------------------- search


def search(process: ProcessState, args: argparse.Namespace) -> int:
    started = time.monotonic()
    from ..search import run_search

    query = " ".join(args.query)
    if not query.strip():
        raise CommandError("the query is empty")
    if not 1 <= args.limit <= 10:
        raise CommandError("--limit must be from 1 to 10")
    from ..fulltext.query import TimeBoundError, time_window

    try:
        window = time_window(args.since, args.until, time.time())
    except TimeBoundError as error:
        raise CommandError(str(error)) from None
    cwd = os.path.abspath(args.cwd) if args.cwd else os.getcwd()
    if args.cwd and not os.path.isdir(cwd):
        raise CommandError(f"no such folder: {args.cwd}")
    if args.session is not None:
        with opened(process) as (_env, db, _projects):
            if not args.session.strip() or db.session(args.session.strip()) is None:
                raise CommandError(f"session not found: {args.session}")
    # build_index=False: a terminal search never starts indexing it would abandon on exit.
    result = run_search(
        process,
        query,
        args.mode,
        args.limit,
        args.session or "",
        cwd,
        build_index=False,
        started=started,
        window=window,
        every_project=args.all_projects,
    )
    if args.json:
        print(terminal_json(result))
        return 0 if result.get("success") else 1
    if not result.get("success"):
        raise CommandError(result.get("error", "search failed"))
    print(readable(result))
    if result.get("semantic_error"):
        print(
            f"{hermes_program()} project-history: semantic search unavailable: {result['semantic_error']}",
            file=sys.stderr,
        )
        return 1 if args.mode != "keyword" else 0
    return 0


def terminal_json(result: dict[str, Any]) -> str:
    """The tool's JSON for a terminal: control and format characters (a bidi override, C1
    controls, lone surrogates in a session id another tool wrote) written as ``\\uXXXX`` escapes.
    JSON escapes only C0 controls itself; escaping keeps the data (the id parses back as it is),
    where the readable output, which is not read back, replaces them with spaces."""
    text = json.dumps(result, ensure_ascii=False, indent=2)
    return _JSON_UNSAFE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    point = ord(match.group())
    if point < 0x20:  # json.dumps escaped those in strings: this is its own line break
        return match.group()
    if point > 0xFFFF:  # as a UTF-16 surrogate pair, the only way JSON writes it
        point -= 0x10000
        return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"
    return f"\\u{point:04x}"


# Outside JSON's strings there are only ASCII punctuation and spaces: every match is in a string.
_JSON_UNSAFE = re.compile(f"[{CONTROL_CHARACTERS}]")


def readable(result: dict[str, Any]) -> str:
    lines = []
    if result.get("project"):
        lines.append(
            f"Project: {label(result['project'])}  ·  "
            f"{counted(result.get('sessions_in_scope') or 0, 'conversation')}  ·  "
            f"semantic: {result.get('semantic_status')}"
        )
    if result.get("message"):
        lines.append(result["message"])
        if result.get("sessions_in_scope") == 0 and not result.get("project"):  # in no project
            lines.append(
                "Run it inside a project's folder, or name one: --cwd DIR (a folder of the project) "
                f"or --session ID (a conversation of it); {command_line('project-history', 'status')} "
                "lists the projects."
            )
    lines.extend(f"Note: {w}" for w in result.get("warnings", []) if w != result.get("message"))
    for number, hit in enumerate(result.get("results", []), start=1):
        # A session id is any string another tool wrote (an escape, an OSC 8 link, a bidi
        # override): cleaned for the terminal as titles and snippets are.
        link = without_controls(hit["link"])
        lines.append(f"{number}. {hit.get('title') or '(untitled)'}  [{hit['when']}]  {link}")
        lines.append(f"   {hit['snippet']}")
        for field in ("reply", "question"):  # what answers the hit, already cleaned as the snippet
            if hit.get(field):
                lines.append(f"   {field}: {without_controls(hit[field])}")
        strength = f", relevance {hit['relevance']:.2f}" if hit.get("relevance") is not None else ""
        lines.append(f"   found by: {hit['score_source']}{strength}, message {hit['message_id']}")
        if hit.get("project"):  # --all-projects: each result names its project
            lines.append(f"   project: {label(hit['project'])}")
    consent = result.get("semantic_consent")
    if consent:
        lines.append(f"Semantic search needs consent: {consent['on_yes_run']}")
    elif result.get("mode") != "keyword" and result.get("semantic_status") in ("partial", "indexing"):
        covered = result.get("semantic_coverage") or {}
        lines.append(
            f"Semantic search covers {covered.get('indexed_messages', 0)} of "
            f"{covered.get('messages', '?')} messages of this project so far (the most recent first). "
            f"Complete it with: {command_line('project-history', 'index')}"
        )
    return "\n".join(lines)
