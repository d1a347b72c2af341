"""The documentation states the code's defaults: every ``| `key` | `default` |`` row of a table in
README.md and docs/*.md that names a setting must match ``config_schema.EmbeddingSettings``."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\|\s*(`[a-z_]+`(?:\s*,\s*`[a-z_]+`)*)\s*\|\s*([^|]+?)\s*\|", re.MULTILINE)


def _schema():
    spec = importlib.util.spec_from_file_location(
        "phr_config_schema", REPO / "project-history-recall" / "config_schema.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _value(text: str):
    text = text.strip().strip("`")
    if text in ("true", "false"):
        return text == "true"
    if text in ('""', "''"):
        return ""
    try:
        return float(text)
    except ValueError:
        return text


def _rows(path: Path) -> list[tuple[str, object]]:
    rows = []
    for keys, defaults in ROW.findall(path.read_text(encoding="utf-8")):
        names = [k.strip().strip("`") for k in keys.split(",")]
        values = [v for v in re.split(r"\s*,\s*", defaults)]
        if len(values) != len(names):
            values = [defaults] * len(names)
        rows += [(name, _value(value)) for name, value in zip(names, values, strict=True)]
    return rows


def test_documented_defaults_match_the_code():
    schema = _schema()
    defaults = {f.name: f.default for f in fields(schema.EmbeddingSettings)}
    checked = 0
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for name, documented in _rows(path):
            if name not in defaults:
                continue
            actual = defaults[name]
            expected = (
                float(actual) if isinstance(actual, int | float) and not isinstance(actual, bool) else actual
            )
            assert documented == expected, (
                f"{path.name}: {name} documented as {documented!r}, code has {actual!r}"
            )
            checked += 1
    readme_keys = {name for name, _ in _rows(REPO / "README.md")}
    assert {"top_k", "rrf_k", "keyword_weight", "semantic_weight", "provider"} <= readme_keys
    assert checked >= 20


def test_readme_is_a_short_user_guide():
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert len(text.split()) <= 1500
    assert "§" not in text  # no references to spec sections a user cannot look up
    for needed in (
        "hermes plugins install",
        "--enable",
        "replace built-in tools",
        "hermes project create",
        "setup local",
        "revoke --purge",
        "hermes plugins remove",
        "make demo",
        "make test",
    ):
        assert needed in text, needed


def test_after_install_gives_the_three_commands():
    text = (REPO / "project-history-recall" / "after-install.md").read_text(encoding="utf-8")
    for command in ("setup local --yes --allow-all-projects", "allow --all-projects", "index --all-projects"):
        assert f"hermes project-history {command}" in text
