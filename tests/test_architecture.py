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


# Below the commands (layer 5), click is imported only by the errors every command shows and by
# the modules with a command line of their own; the engine and the drivers hand what they say to
# `notices` or their reporter.
CLICK_BELOW_THE_COMMANDS = {
    "errors",
    "ledger",
    "stoprule",
    "metrics",
    "prune",
    "targets",
    "reward/jsonl_stream",
}


def click_imports(path: Path) -> list[int]:
    """The lines of `path` that import click, wherever they are."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "click" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "click")
    )


def test_no_module_below_the_commands_imports_click():
    layers, found = layer_table(), modules()
    importing = [
        f"{name} (layer {layers[name]}) imports click at line {line}"
        for name, path in sorted(found.items())
        if layers[name] < 5 and name not in CLICK_BELOW_THE_COMMANDS
        for line in click_imports(path)
    ]
    assert importing == [], "the engine says things through notices.warn (or its reporter), never click"


def test_the_click_check_sees_an_import_inside_a_function(tmp_path: Path):
    source = tmp_path / "x.py"
    source.write_text("import json\n\ndef f():\n    from click import echo\n\nimport click.testing\n")
    assert click_imports(source) == [4, 6]


def test_the_layering_check_sees_an_import_inside_a_function(tmp_path: Path):
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from autoresearch_skills.campaign import experiment\n")
    assert imports(source, {"campaign/experiment"}) == [("campaign/experiment", 2)]


# ---------------------------------------------------------------- facts are data, sentences are for people

SENTENCES = {
    "description",
    "reason",
}  # for people: a row's, a result's, a watcher's; no code reads a fact there
TEXT_TESTS = {"startswith", "endswith", "split", "rsplit", "partition", "rpartition", "removeprefix",
              "removesuffix", "find", "rfind", "index", "rindex", "count"}  # fmt: skip
REGEX_CALLS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
SAME_TEXT = {"lower", "upper", "casefold", "strip", "lstrip", "rstrip"}
# The one reader of a sentence: rows an older release wrote said their reason, rerun and hybrid mode
# in the description (`ledger.read_older_row`, where each column is empty).
OLDER_ROW_READER = {("ledger", "read_older_row"), ("ledger", "_older_cause")}
STATUS_WORDS = {"keep", "discard", "candidate"}  # written `Status.KEEP` ...: one literal each, in `outcome`


def is_sentence(node: ast.AST) -> bool:
    """`x.description`, `x.reason` (also lowered, stripped, sliced, `str()`ed), `x["reason"]`, `x.get("reason")`."""
    if isinstance(node, ast.Attribute):
        return node.attr in SENTENCES
    if isinstance(node, ast.Subscript):
        key = node.slice
        return (isinstance(key, ast.Constant) and key.value in SENTENCES) or is_sentence(node.value)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in SAME_TEXT:
            return is_sentence(func.value)
        if isinstance(func, ast.Attribute) and func.attr == "get" and node.args:
            return isinstance(node.args[0], ast.Constant) and node.args[0].value in SENTENCES
        if isinstance(func, ast.Name) and func.id == "str" and node.args:
            return is_sentence(node.args[0])
    return False


def reads_a_sentence(node: ast.AST) -> bool:
    """A substring test, a comparison with a text, a string test or a regex over a sentence."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and is_sentence(right):
                return True
            if isinstance(op, (ast.Eq, ast.NotEq)) and any(is_sentence(s) for s in sides):
                return any(isinstance(s, (ast.Constant, ast.JoinedStr)) for s in sides)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in TEXT_TESTS and is_sentence(node.func.value):
            return True
        if node.func.attr in REGEX_CALLS and any(is_sentence(a) for a in node.args):
            return True
    return False


def functions_and_nodes(tree: ast.AST):
    """(enclosing function name or "", node) for every node."""
    stack = [("", tree)]
    while stack:
        where, node = stack.pop()
        yield where, node
        inner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
        stack.extend((inner, child) for child in ast.iter_child_nodes(node))


def sentence_readers(source: str, module: str) -> list[str]:
    return [
        f"{module}:{node.lineno}: {ast.unparse(node)[:100]}"
        for where, node in functions_and_nodes(ast.parse(source))
        if reads_a_sentence(node) and (module, where) not in OLDER_ROW_READER
    ]


def test_no_code_reads_a_fact_back_from_a_description_or_a_reason():
    found = [
        line for name, path in sorted(modules().items()) for line in sentence_readers(path.read_text(), name)
    ]
    assert found == [], "decide on a typed field (status, cause, mode), never on a sentence for people"


def test_the_sentence_check_sees_each_way_of_reading_one():
    caught = [
        '"first step" in reason.lower() or "first step" in row.reason.lower()',
        'row.description.split(" [", 1)[0]',
        'row.description.rsplit("[", 1)',
        'description.startswith(note) or row.reason.startswith("exit code")',
        're.search(r"exit code (\\d+)", row.reason)',
        'PATTERN.sub("", r.description)',
        'row.get("description").startswith("[hybrid:")',
        'result.reason == "cancelled"',
    ]
    for text in caught:
        assert sentence_readers(text, "x"), text
    allowed = ['row.text()', 'f"{row.description} [{row.status}: {row.reason}]"', "if row.reason: pass",
               'row.cause is CrashCause.STALL', 'x = row.description']  # fmt: skip
    for text in allowed:
        assert not sentence_readers(text, "x"), text
    assert not sentence_readers('def read_older_row(row):\n    return "x" in row.description\n', "ledger")


def test_each_status_is_written_once_as_a_literal():
    found = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, path in sorted(modules().items())
        if name != "outcome"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in STATUS_WORDS
    ]
    assert found == [], "use outcome.Status (Status.KEEP, Status.DISCARD, Status.CANDIDATE)"
