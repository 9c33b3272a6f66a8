"""ARCHITECTURE.md's layer table is the truth: every module is in it, none imports from a layer
above its own (imports inside functions included), and no import circle exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
PACKAGE = "autoresearch_skills"


def layer_table() -> dict[str, int]:
    layers: dict[str, int] = {}
    for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines():
        row = re.match(r"\|\s*(\d+)\s+[a-z]+\s*\|(.*?)\|", line)
        if row:
            for name in re.findall(r"`([^`]+)`", row[2]):
                layers[name] = int(row[1])
    return layers


def module_name(path: Path) -> str:
    parts = list(path.relative_to(TOOLS).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return "/".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in TOOLS.rglob("*.py")}


def imports(path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(module imported, line) for every import of the package in `path`, wherever it is."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            base = node.module.split(".")[1:]
            for alias in node.names:
                whole = "/".join([*base, alias.name])
                found.append((whole if whole in known else "/".join(base) or "__init__", node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append(("/".join(alias.name.split(".")[1:]) or "__init__", node.lineno))
    return [(name, line) for name, line in found if name in known]


def test_every_module_has_a_layer_and_every_listed_module_exists():
    layers, found = layer_table(), modules()
    assert sorted(set(found) - set(layers)) == [], "modules missing from ARCHITECTURE.md's layer table"
    assert sorted(set(layers) - set(found)) == [], "ARCHITECTURE.md lists modules that do not exist"


def test_no_module_imports_from_a_layer_above_its_own():
    layers, found = layer_table(), modules()
    upward = [
        f"{name} (layer {layers[name]}) imports {target} (layer {layers[target]}) at line {line}"
        for name, path in sorted(found.items())
        for target, line in imports(path, set(found))
        if layers[target] > layers[name]
    ]
    assert upward == []


def test_there_is_no_import_circle():
    found = modules()
    graph = {name: {t for t, _ in imports(path, set(found)) if t != name} for name, path in found.items()}
    circles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert circles == []


def test_the_layering_check_sees_an_import_inside_a_function(tmp_path: Path):
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from autoresearch_skills.campaign import experiment\n")
    assert imports(source, {"campaign/experiment"}) == [("campaign/experiment", 2)]
