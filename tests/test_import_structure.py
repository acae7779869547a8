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
    """pyproject finds the packages itself (``packages.find``, regular packages only): a folder
    of the package holding code or the grammar but no ``__init__.py`` would be left out of the
    wheel (CI installs from the files) while the editable checkout still works."""
    import tomllib
    find = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["hlo_compile", "hlo_compile.*"] and find["namespaces"] is False
    folders = {p.parent for p in PACKAGE.rglob("*") if p.suffix in (".py", ".lark") and "__pycache__" not in p.parts}
    missing = sorted(str(f.relative_to(PACKAGE.parent)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"folders that would not be packaged (no __init__.py): {missing}"


# ---- the layer order of docs/DESIGN.md §1 ------------------------------------------------------

# Each top-level package or file of hlo_compile and its layer, in the order data flows: a file
# imports only its own layer and the ones before it (an import inside a function counts).
LAYERS: dict[str, int] = {
    "options": 0,  # CompileOptions: imports nothing of ours
    "grammars": 0,  # the grammar file, as package data
    "hlo": 0,  # the front end: imports nothing else of ours (and not options either: ``_hlo_imports_nothing``)
    "": 1,  # the package itself (``hlo_compile/__init__``: lazy re-exports of hlo, __version__)
    "indexing": 2,
    "gpu": 2,  # what we know of GPUs (devices, architectures, reduction facts): below passes and codegen
    "interpreter": 3,  # and only hlo: ``_INTERPRETER_IMPORTS``
    "passes": 3,
    "codegen": 4,
    "targets": 5,
    "driver": 6,  # stages, the pipeline loop, the kernel cache, dumps, overrides, what runs outside kernels
    "runtime": 7,
    # the tools: fuzz/ sits beside passes/ in DESIGN's tree by topic, but it runs the runtime as cli/ does
    "fuzz": 8,
    "cli": 8,
}
# the interpreter is the reference: it never shares code with the thing it checks
_INTERPRETER_IMPORTS = {"hlo", "interpreter"}

# The upward imports that exist today, (importer, imported) → why it is not fixed yet. A new one
# fails ``test_imports_follow_the_layer_order``; fix it (a shared predicate moved below both) or
# add it here with its reason. None today.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_violations(edges) -> list[str]:
    """``importer:line -> imported`` for each import against the layer order (``LAYERS``; the
    interpreter's and hlo's own rules) that ``UPWARD_ALLOWED`` does not name."""
    bad = []
    for importer, imported, _, line in edges:
        source, target = _layer(importer), _layer(imported)
        if source == target or (importer, imported) in UPWARD_ALLOWED:
            continue
        upward = LAYERS[target] > LAYERS[source]
        if source == "interpreter" and target not in _INTERPRETER_IMPORTS:
            upward = True
        if source == "hlo":  # imports nothing else of ours
            upward = True
        if upward:
            bad.append(f"{importer}:{line} -> {imported} ({source or 'hlo_compile'} may not import "
                       f"{target or 'hlo_compile'})")
    return sorted(set(bad))


def test_every_package_has_a_layer():
    modules = _modules()
    assert not {_layer(m) for m in modules} - LAYERS.keys(), "add the new package or file to LAYERS"
    assert not {k[0] for k in UPWARD_ALLOWED} - modules.keys() and not {k[1] for k in UPWARD_ALLOWED} - modules.keys()


def test_imports_follow_the_layer_order():
    edges = list(_edges(_modules()))
    bad = _layer_violations(edges)
    assert not bad, "imports against the layer order of docs/DESIGN.md §1:\n" + "\n".join(bad)
    # an allowed upward import that is gone is taken off the list
    used = {(a, b) for a, b, _, _ in edges}
    stale = sorted(f"{a} -> {b}" for a, b in UPWARD_ALLOWED if (a, b) not in used)
    assert not stale, "UPWARD_ALLOWED names imports that no longer exist:\n" + "\n".join(stale)


def test_the_layer_check_can_fail():
    edges = [("hlo_compile.codegen.x", "hlo_compile.runtime.y", [], 3),  # codegen never imports runtime
             ("hlo_compile.runtime.y", "hlo_compile.cli.z", [], 4),  # runtime never imports cli
             ("hlo_compile.interpreter.e", "hlo_compile.indexing.m", [], 5),  # the interpreter: hlo only
             ("hlo_compile.hlo.p", "hlo_compile.options", [], 6),  # hlo: nothing else of ours
             ("hlo_compile.cli.z", "hlo_compile.runtime.y", [], 7),  # downward: fine
             ("hlo_compile.driver.stages", "hlo_compile.driver.runnable", [], 8)]  # allowed
    assert [b.split(" ")[0] for b in _layer_violations(edges)] == [
        "hlo_compile.codegen.x:3", "hlo_compile.hlo.p:6", "hlo_compile.interpreter.e:5", "hlo_compile.runtime.y:4"]
