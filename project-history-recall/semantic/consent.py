"""The consent chain (spec §五): ``consent.json``, the gate every send passes, and what to ask.

Nothing is embedded unless :func:`semantic_gate` says ``ok``: semantic search is on, and the
user agreed to this provider, endpoint, model and profile for this project. The record is
written by ``hermes project-history enable`` (by the user, or by the agent after the user said
yes in chat) and read once per call.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..attribution import project_key
from ..config_schema import EmbeddingSettings, endpoint_of, endpoint_secret
from ..store import HermesEnv, command_line, replace_private_file
from .index_store import open_lock_file

logger = logging.getLogger(__name__)

ALL_PROJECTS = "*"
CONSENT_SCOPE = "history+incremental"
WHAT_IS_SENT = "the text of the user and assistant messages"


#: consent.json's fields and their types: anything else in the file means no consent.
_REQUIRED = {
    "provider": str,
    "endpoint": str,
    "model": str,
    "profile": str,
    "projects": list,
    "confirmed_at": str,
    "scope": str,
}
_OPTIONAL = {"endpoint_secret": str, "disabled_at": str, "covers": dict}


def consent_problem(data: Any) -> str | None:
    """Why ``data`` (consent.json as read) is no consent, or None when it is a well-formed record.

    Every field is checked for its type: a ``projects`` that is the string ``"*"`` instead of a
    list, a project that is not a string, a field this version does not know: no consent, never a
    guess at what was meant.
    """
    if not isinstance(data, dict):
        return "it is not a JSON object"
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        return f"it lacks {', '.join(missing)}"
    unknown = [key for key in data if key not in _REQUIRED and key not in _OPTIONAL]
    if unknown:
        return f"it has fields this version does not know: {', '.join(map(repr, unknown[:3]))}"
    for key, kind in (*_REQUIRED.items(), *_OPTIONAL.items()):
        if key in data and not isinstance(data[key], kind):
            return f"{key} must be a {'list' if kind is list else kind.__name__}"
    if not all(isinstance(project, str) and project for project in data["projects"]):
        return "projects must be a list of project names"
    covers = data.get("covers", {})
    if not all(
        isinstance(ref, str) and isinstance(folders, list) and all(isinstance(f, str) for f in folders)
        for ref, folders in covers.items()
    ):
        return "covers must map each project to a list of folders"
    return None


def _load(env: HermesEnv) -> tuple[dict[str, Any] | None, str | None]:
    path = env.consent_path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as error:
        return None, f"it cannot be read ({type(error).__name__})"
    return data, consent_problem(data)


def read_consent(env: HermesEnv) -> dict[str, Any] | None:
    """The consent on record, or None: no file, or one that is not a well-formed record (which is
    logged; ``status`` says why)."""
    data, problem = _load(env)
    if problem:
        logger.warning("%s is no consent (%s); semantic search sends nothing", env.consent_path, problem)
        return None
    return data


def consent_file_problem(env: HermesEnv) -> str | None:
    """Why consent.json, which exists, is no consent (for ``status``); None when it is one or absent."""
    return _load(env)[1]


def update_consent(
    env: HermesEnv, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """Read, change and write consent.json under one lock: two ``enable`` runs never lose a project.

    ``change`` gets the current record (or None) and returns the new one (None: leave the file).
    The file is replaced atomically through a unique temporary name and is 0600.
    """
    path = env.consent_path
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open_lock_file(path.parent / "consent.lock")  # never through a symbolic link
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = change(read_consent(env))
        if record is not None:
            replace_private_file(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        return record
    finally:
        os.close(lock)


def write_consent(env: HermesEnv, record: dict[str, Any]) -> None:
    """Replace the record whole (under the same lock as :func:`update_consent`)."""
    update_consent(env, lambda _current: record)


def project_ref(identity: Mapping[str, Any]) -> str:
    """How consent.json names a project: its id, or ``repo:<path key>`` for an automatic repo."""
    if identity.get("kind") == "explicit":
        return str(identity.get("id"))
    if identity.get("kind") == "auto":
        return f"repo:{identity.get('key')}"
    return ""


_TARGET_KEYS = ("provider", "endpoint", "endpoint_secret", "model", "profile")


def _target(embedding: EmbeddingSettings, profile: str) -> dict[str, str]:
    """What a consent names: the endpoint redacted, its credentials only as a digest (never stored)."""
    return {
        "provider": embedding.provider,
        "endpoint": endpoint_of(embedding),
        "endpoint_secret": endpoint_secret(embedding),
        "model": embedding.model,
        "profile": profile,
    }


def same_target(consent: Mapping[str, Any] | None, embedding: EmbeddingSettings, profile: str) -> bool:
    """Did the user agree to exactly this provider, endpoint (and its credentials), model and profile?"""
    if not consent:
        return False
    target = _target(embedding, profile)
    return all((consent.get(key) or "") == target[key] for key in _TARGET_KEYS)


def destination(embedding: EmbeddingSettings) -> str:
    """Where the text goes, in words a user can check."""
    if embedding.provider == "local":
        return destination_local()
    return endpoint_of(embedding)


def consent_record(
    embedding: EmbeddingSettings,
    profile: str,
    projects: list[str],
    confirmed_at: str,
    covers: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """What the user agreed to: this provider, endpoint and model, for these projects, each as far
    as its folders reached then (``covers``: project -> folders; spec §五.4 asks again when a
    project's scope grows)."""
    record: dict[str, Any] = {
        **_target(embedding, profile),
        "projects": sorted(set(projects)),
        "confirmed_at": confirmed_at,
        "scope": CONSENT_SCOPE,
    }
    if covers:
        record["covers"] = {ref: sorted(set(folders)) for ref, folders in sorted(covers.items())}
    return record


def uncovered_folders(
    consent: Mapping[str, Any] | None, identity: Mapping[str, Any], folders: Sequence[str] | None
) -> list[str]:
    """This project's folders that its consent did not cover (the project grew since); [] when
    all are covered, when the consent is for every project, or when nothing was recorded."""
    if not consent or folders is None:
        return []
    covered = (consent.get("covers") or {}).get(project_ref(identity))
    if covered is None or ALL_PROJECTS in (consent.get("projects") or []):
        return []
    return sorted(set(folders) - set(covered))


def semantic_gate(
    embedding: EmbeddingSettings,
    consent: Mapping[str, Any] | None,
    identity: Mapping[str, Any],
    profile: str,
    folders: Sequence[str] | None = None,
) -> str:
    """``ok``, ``disabled`` or ``consent_required``: may this project's history be embedded now?

    Off after the user had agreed (or after ``disable``) is ``disabled``; off on a fresh install,
    or on with a consent that does not name this provider, endpoint, model, profile and project,
    or whose project has folders now that it did not cover (``folders``: the project's folders
    now), is ``consent_required``. Nothing is sent unless this says ``ok``.
    """
    if not embedding.enabled:
        return "disabled" if consent else "consent_required"
    if not consent or consent.get("disabled_at") or not same_target(consent, embedding, profile):
        return "consent_required"
    projects = consent.get("projects") or []
    if ALL_PROJECTS not in projects and project_ref(identity) not in projects:
        return "consent_required"
    if uncovered_folders(consent, identity, folders):
        return "consent_required"
    return "ok"


def consent_request(
    env: HermesEnv, identity: Mapping[str, Any], folders: Sequence[str] | None = None
) -> dict[str, Any]:
    """What the agent should ask the user, and the command that records a yes (spec §五).

    Until a provider was chosen (by ``setup``, or in config.yaml), the question offers the local
    model first (no key, nothing leaves the machine) and names the configured remote provider
    beside it (``alternatives``); the yes-command then does the whole job, ``setup local`` and
    the consent, and works on a plain Hermes (setup installs what the model needs). Once one is
    chosen the question is about that provider, and ``setup_needed`` says what to run first when
    it could not work even with a yes. When the project has folders its consent did not cover
    (``folders``: its folders now), the question names them: spec §五.4 asks again when the
    scope grows.
    """
    from .runtime import default_local_model, provider_problem, setup_hint

    embedding, profile = env.settings.embedding, env.profile
    key = project_key(identity)
    ref = project_ref(identity)
    project = identity.get("name") or identity.get("key") or ref
    grown = uncovered_folders(read_consent(env), identity, folders)
    opening = (
        f"This project now also covers {', '.join(grown)}, which your earlier consent did not. "
        if grown
        else "Semantic search is off until you agree. "
    )
    sends = "user and assistant message text of this project's sessions (history and new messages)"
    if not env.settings.provider_chosen:
        local = default_local_model()
        remote = {
            "provider": embedding.provider,
            "model": embedding.model,
            "endpoint": endpoint_of(embedding),
            "needs": f"an API key as {_key_env()} in {env.home / '.env'}",
            "on_yes_run": command_line(
                "project-history", "setup", embedding.provider, "--yes", "--allow", key, profile=profile
            ),
        }
        return {
            "ask_user": (
                f"{opening}It can run on this machine with a local model ({local}, a one-time download "
                f"from PyPI; nothing leaves the machine), or send {WHAT_IS_SENT} in this project's "
                f"conversations ({project}), past and future, to {embedding.provider} model "
                f"'{embedding.model}' at {endpoint_of(embedding)} (needs an API key). Either way the "
                "embeddings are stored locally. Enable it for this project with the local model?"
            ),
            "on_yes_run": command_line(
                "project-history", "setup", "local", "--yes", "--allow", key, profile=profile
            ),
            "provider": "local",
            "model": local,
            "endpoint": destination_local(),
            "project": ref,
            "sends": f"nothing leaves the machine; with {embedding.provider}: {sends}",
            "alternatives": [remote],
        }
    problem = provider_problem(embedding, env.api_key(), env.settings.problems)
    extra = {"setup_needed": f"{problem}; run {setup_hint(embedding.provider)} first"} if problem else {}
    return {
        **extra,
        "ask_user": (
            f"{opening}If enabled, {WHAT_IS_SENT} in this project's "
            f"conversations ({project}), past and future, is sent to {embedding.provider} model "
            f"'{embedding.model}' at {destination(embedding)} to compute embeddings, which are stored "
            f"locally. Enable it for this project?"
        ),
        "on_yes_run": command_line("project-history", "allow", "--project", key, "--yes", profile=profile),
        "provider": embedding.provider,
        "model": embedding.model,
        "endpoint": endpoint_of(embedding),
        "project": ref,
        "sends": sends,
    }


def destination_local() -> str:
    return "this machine (in-process model; nothing leaves it)"


def _key_env() -> str:
    from ..config_schema import API_KEY_ENV

    return API_KEY_ENV
