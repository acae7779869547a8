"""The package's import structure, read with ``ast``: no file-level import cycle (an import inside
a function counts: it only hides a cycle) and no file importing another file's ``_private``
names. Imports under ``if TYPE_CHECKING:`` are left out (they never run)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hlo_compile"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import node that can run (not under ``if TYPE_CHECKING``)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            stack.append(child)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _edges(modules: dict[str, Path]):
    """(importer, imported module, names taken, line) for every import inside the package."""
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        yield name, alias.name, [], node.lineno
                continue
            target = _resolve(name, is_package, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:  # ``from pkg import submodule``
                    yield name, sub, [], node.lineno
                elif target in modules:
                    yield name, target, [alias.name], node.lineno


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles():
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for importer, imported, _, _ in _edges(modules):
        if imported != importer and not importer.startswith(imported + "."):
            graph[importer].add(imported)  # a package's own __init__ is not a cycle of its modules
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_names_imported_across_files():
    modules = _modules()
    bad = [f"{modules[importer].relative_to(PACKAGE.parent)}:{line} takes {name} from {imported}"
           for importer, imported, names, line in _edges(modules) if imported != importer
           for name in names if name.startswith("_") and not name.startswith("__")]
    assert not bad, "\n".join(bad)


def test_the_checks_can_fail():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("from .x import _hidden\nif TYPE_CHECKING:\n    from .y import z\ndef f():\n    import os\n")
    nodes = list(_imports(tree))
    assert len(nodes) == 2 and _resolve("hlo_compile.a.b", False, nodes[0]) == "hlo_compile.a.x"


def test_every_package_is_in_the_wheel():
    """pyproject lists packages explicitly: a new subpackage missing there installs a broken
    wheel (CI installs from the files) while the editable checkout still works."""
    import tomllib
    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert not found - listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"
