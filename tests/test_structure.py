"""The package's shape, read from its source with ``ast`` (nothing is imported): no import circle
between its modules, and no string compare on an input kind outside the input-kind registry
(``trainables/input_kinds.py``), which owns what differs per kind; and, in a fresh interpreter,
that a trial's process does not import the libraries only some steps need."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The repository's top-level folders and the import names the install gives them (pyproject.toml).
PACKAGES = {"api": "dmlsearch", "search": "dmlsearch.search",
            "trainables": "dmlsearch.trainables", "spaces": "dmlsearch.spaces"}
KIND_REGISTRY = "dmlsearch.trainables.input_kinds"
KIND_NAMES = ("audio", "image")


def package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package is its ``__init__``)."""
    modules: dict[str, Path] = {}
    for folder, name in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([name, *parts])] = path
    return modules


@functools.cache
def _parsed(path: Path) -> tuple[str, ast.Module]:
    """A module's source and tree, read once per test session."""
    source = path.read_text()
    return source, ast.parse(source, filename=str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, *, typing_only: bool = False
             ) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every ``import`` and ``from`` anywhere in ``tree`` (functions included), except those under
    ``if TYPE_CHECKING:``, which never run (with ``typing_only``: those too)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not typing_only:
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node, typing_only=typing_only)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name a ``from`` import names, relative forms resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph(*, typing_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name imported from a package is an edge to
    its submodule when it is one, else to the package); ``typing_only``: with the imports under
    ``if TYPE_CHECKING:``."""
    modules = package_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(_parsed(path)[1], typing_only=typing_only):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                source = _resolve(node, name, is_package)
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                           else source for alias in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per group of modules that import each other (a strongly connected component of
    more than one module), each as its modules in import order with the first again at the end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the package is a few hundred modules
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle_in(graph, group) for group in groups]


def _circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest circle through the group's first module (breadth first, inside the group)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle through {start}")  # a strongly connected group has one


def kind_compares(source: str, label: str, kinds: tuple[str, ...] = KIND_NAMES,
                  tree: ast.AST | None = None) -> list[str]:
    """``label:line: code`` of every compare of a value with an input kind's name in ``source``
    (``== "audio"``, ``!= "image"``, ``in ("audio", ...)``); ``tree``: its tree, if parsed."""
    found = []
    for node in ast.walk(tree or ast.parse(source, filename=label)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.Eq | ast.NotEq):
                named = [o for o in operands if isinstance(o, ast.Constant)]
            elif isinstance(op, ast.In | ast.NotIn) and isinstance(
                    right, ast.Tuple | ast.List | ast.Set):
                named = [e for e in right.elts if isinstance(e, ast.Constant)]
            else:
                continue
            if any(o.value in kinds for o in named):
                found.append(f"{label}:{node.lineno}: {ast.get_source_segment(source, node)}")
                break
    return found


def test_the_package_has_no_import_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles (each module imports the next):\n" + "\n".join(
        " -> ".join(circle) for circle in found)


def test_not_even_type_annotations_import_in_a_circle() -> None:
    """What a reader follows: the modules a type annotation names count too (the issue's three
    circles were partly such imports)."""
    found = circles(import_graph(typing_only=True))
    assert not found, "import circles, counting TYPE_CHECKING imports:\n" + "\n".join(
        " -> ".join(circle) for circle in found)


def test_the_circle_finder_finds_each_circle_in_order() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert circles(graph) == [["a", "b", "c", "a"], ["e", "e2", "e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_import_walk_resolves_relative_forms_and_skips_type_checking() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nfrom . import b\nfrom .c import x\n"
                     "if TYPE_CHECKING:\n    from .d import y\nelse:\n    import e\n"
                     "def f():\n    from ..g import h\n")
    nodes = list(_imports(tree))
    assert [_resolve(n, "p.q.a", False) for n in nodes if isinstance(n, ast.ImportFrom)] == [
        "typing", "p.q", "p.q.c", "p.g"]
    assert [_resolve(n, "p.q", True) for n in nodes if isinstance(n, ast.ImportFrom)][1] == "p.q"
    assert [a.name for n in nodes if isinstance(n, ast.Import) for a in n.names] == ["e"]


def test_only_the_input_kind_registry_compares_with_a_kind_name() -> None:
    from dmlsearch.trainables.input_kinds import INPUT_KINDS

    assert set(KIND_NAMES) <= set(INPUT_KINDS.names())
    found = []
    for name, path in package_modules().items():
        if name != KIND_REGISTRY:
            source, tree = _parsed(path)
            found += kind_compares(source, str(path.relative_to(ROOT)), tree=tree)
    assert not found, ("compares with an input kind's name outside trainables/input_kinds.py "
                       "(ask the kind's registry entry instead):\n" + "\n".join(found))


def test_the_compare_finder_sees_each_form() -> None:
    source = ('a = kind == "audio"\nb = "image" != kind\nc = kind in ("audio", "x")\n'
              'd = kind == "speakers"\ne = kind in names\nf = 0 < n == "image"\n')
    assert [line.split(": ", 1)[1] for line in kind_compares(source, "m.py")] == [
        'kind == "audio"', '"image" != kind', 'kind in ("audio", "x")', '0 < n == "image"']



def test_the_files_that_share_a_session_search_are_declared(request: pytest.FixtureRequest
                                                           ) -> None:
    """tests/scheduling.py runs the files that ask for one session-scoped search in one
    worker: every file collected with this test that asks for one is in its declared group."""
    from tests.scheduling import SHARED_SEARCHES
    from tests.scheduling import worker_group

    for item in request.session.items:
        path = item.nodeid.split("::")[0]
        for fixture, files in SHARED_SEARCHES.items():
            if fixture in getattr(item, "fixturenames", ()):
                assert path in files, f"{path} asks for {fixture}: add it to SHARED_SEARCHES"
    assert worker_group("tests/test_api.py::test_x") == "tests/e2e/test_replay.py"
    assert worker_group("tests/search/test_cli.py::test_x[a]") == "tests/search/test_cli.py"


# Imported where they are used, not by every process that trains or drives a search (each
# trial's and each command's, seconds each): torchvision (its ops and backbones:
# trainables/data/_transforms.py, trainables/models/_resnet.py, _googlenet.py) and scikit-learn
# (NMI, t-SNE, fANOVA's forest).
NOT_IMPORTED_BY_TRAINING = ("torchvision", "sklearn")


def test_trial_and_driver_processes_import_neither_torchvision_nor_scikit_learn() -> None:
    import subprocess
    import sys

    check = ("import sys, dmlsearch.trainables.trial, dmlsearch.search.tune.trainable, "
             "dmlsearch.search.cli, dmlsearch.search.lifecycle; "
             f"print(sorted(m for m in {NOT_IMPORTED_BY_TRAINING!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
