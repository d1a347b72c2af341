"""The module map in docs/design.md is the import graph: every import of the plugin's code, lazy
ones included, runs down that table, the semantic side is entered through its door only, and no
module-level state is kept outside the process's owner."""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
PLUGIN_DIR = REPO / "project-history-recall"


@functools.cache
def plugin_files() -> dict[str, Path]:
    """Dotted module name (relative to the package, "" for __init__) -> file."""
    files = {}
    for folder, subfolders, names in os.walk(PLUGIN_DIR):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        for name in names:
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            parts = list(path.relative_to(PLUGIN_DIR).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return dict(sorted(files.items()))


def unit_of(module: str) -> str:
    """The row of the map a module belongs to: its top-level file or package."""
    return module.split(".")[0] if module else ""


def layers() -> dict[str, int]:
    """The map's rows: ``| 0 | `attribution.py`, `text/` | ... |`` -> {"attribution": 0, "text": 0}."""
    table = {}
    for line in DESIGN.read_text(encoding="utf-8").splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if not row:
            continue
        for name in re.findall(r"`([^`]+)`", row.group(2)):
            key = name.removesuffix(".py").removesuffix("/")
            table["" if key == "__init__" else key] = int(row.group(1))
    return table


@functools.cache
def imports(module: str, path: Path) -> list[str]:
    """Every plugin module this one imports, at any depth of the file (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package[: len(package) - (node.level - 1)] if node.level > 1 else list(package)
        target = [*base, *(node.module.split(".") if node.module else [])]
        for alias in node.names:
            whole = ".".join([*target, alias.name])
            found.append(whole if whole in plugin_files() else ".".join(target))
    return found


def test_every_module_has_a_row_and_every_row_a_module():
    table = layers()
    units = {unit_of(m) for m in plugin_files()}
    assert units == set(table), (sorted(units - set(table)), sorted(set(table) - units))


def test_imports_run_down_the_map():
    table = layers()
    wrong = []
    for module, path in plugin_files().items():
        for target in imports(module, path):
            here, there = unit_of(module), unit_of(target)
            if here != there and table[there] >= table[here]:
                wrong.append(
                    f"{module or '__init__'} (layer {table[here]}) imports {target} (layer {table[there]})"
                )
    assert not wrong, "\n".join(wrong)


def test_semantic_is_entered_through_its_door_only():
    """Outside ``semantic/`` only the door's names are used (``semantic/__init__.py``'s ``__all__``)."""
    door = ast.parse(plugin_files()["semantic"].read_text(encoding="utf-8"))
    exported = next(
        ast.literal_eval(node.value)
        for node in door.body
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
    )
    wrong = [
        f"{module} imports {target}"
        for module, path in plugin_files().items()
        if unit_of(module) != "semantic"
        for target in imports(module, path)
        if target.startswith("semantic.") and target.removeprefix("semantic.") not in exported
    ]
    assert not wrong, wrong


def test_no_import_circle():
    graph = {m: {t for t in imports(m, p) if t != m} for m, p in plugin_files().items()}
    visiting, done, circles = set(), set(), []

    def visit(node, trail):
        if node in done:
            return
        if node in visiting:
            circles.append([*trail[trail.index(node) :], node])
            return
        visiting.add(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*trail, nxt])
        visiting.discard(node)
        done.add(node)

    for module in sorted(graph):
        visit(module, [module])
    assert not circles, circles


MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def test_modules_keep_only_constants():
    """No module-level dict, list, set or object built from a class of ours: per-process state
    lives in ProcessState (``__init__.py`` keeps the one reference to it)."""
    wrong = []
    for module, path in plugin_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                continue
            names = [
                t.id
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)
            ]
            if names == ["__all__"] or (module == "" and names in (["_state"], ["_lock"])):
                continue
            value = node.value
            if isinstance(value, MUTABLE) and names and not names[0].isupper():
                wrong.append(f"{module}: {names}")
            if isinstance(value, ast.Call) and names and not names[0].isupper():
                called = ast.unparse(value.func)
                if called not in ("logging.getLogger", "re.compile", "frozenset", "tuple", "Path", "TypeVar"):
                    wrong.append(f"{module}: {names} = {called}(...)")
    assert not wrong, wrong
