"""The package's layers as docs/design.md ("Layout of the package") states them, read from the
source: an import only points down (studies -> engine -> core -> validate), the engine has no
circle, and what the engine knows of the physics is exactly what simlab/engine/__init__.py says.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "simlab"
# What the engine may import from outside itself (simlab/engine/__init__.py): the generic
# pieces, the config's spec tables and knob registry, and the default lab.
ENGINE_MAY_IMPORT = {
    "simlab.errors",
    "simlab.validate",
    "simlab.registry",
    "simlab.plugins",
    "simlab.core.spec",
    "simlab.core.knobs",
    "simlab.core.lab",
}
DEFERRED_MARKS = ("# deferred:", "# cycle:")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported simlab module, line, inside a function) for each import of simlab in a file;
    `from simlab.engine import records` names simlab.engine.records."""
    tree = ast.parse(path.read_text())
    out = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for a in child.names:
                    full = f"{child.module}.{a.name}"
                    target = (
                        full
                        if (ROOT.parent / full.replace(".", "/")).exists()
                        or (ROOT.parent / (full.replace(".", "/") + ".py")).exists()
                        else child.module
                    )
                    out.append((target, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return [(m, line, f) for m, line, f in out if m == "simlab" or m.startswith("simlab.")]


def modules(package: str) -> dict[str, Path]:
    base = ROOT.parent / package.replace(".", "/")
    return {module_name(p): p for p in sorted(base.rglob("*.py"))}


def test_engine_imports_only_what_it_declares():
    """No engine module imports studies, cli, plot, theory or a core module other than the
    config's specs, the knob registry and the default lab."""
    bad = []
    for name, path in modules("simlab.engine").items():
        for target, line, _ in imports(path):
            if target.startswith("simlab.engine") or target in ENGINE_MAY_IMPORT:
                continue
            bad.append(f"{name}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_lower_layers_never_import_upward():
    """core imports neither engine, studies, cli nor plot; validate, errors and registry import
    only errors."""
    bad = []
    for name, path in modules("simlab.core").items():
        for target, line, _ in imports(path):
            if target.split(".")[1] in ("engine", "studies", "cli", "plot"):
                bad.append(f"{name}:{line} imports {target}")
    for low in ("simlab/validate.py", "simlab/errors.py", "simlab/registry.py"):
        path = ROOT.parent / low
        for target, line, _ in imports(path):
            if target != "simlab.errors":
                bad.append(f"{low}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_engine_has_no_circle():
    """The engine's module graph (imports at any depth, inside functions too) is acyclic: a
    topological order exists."""
    mods = modules("simlab.engine")
    graph = {
        n: {t for t, _, _ in imports(p) if t in mods and t != n and t != "simlab.engine"}
        for n, p in mods.items()
    }
    order, seen, stack = [], set(), set()

    def walk(n, path):
        if n in stack:
            pytest.fail("engine import circle: " + " -> ".join(path + [n]))
        if n in seen:
            return
        stack.add(n)
        for m in sorted(graph[n]):
            walk(m, path + [n])
        stack.discard(n)
        seen.add(n)
        order.append(n)

    for n in sorted(graph):
        walk(n, [])
    # the plain sweep lies below growth and its parts; the entry chooses between them
    pos = {n: i for i, n in enumerate(order)}
    assert pos["simlab.engine.plain"] < pos["simlab.engine.parts"] < pos["simlab.engine.grow"]
    assert pos["simlab.engine.grow"] < pos["simlab.engine.sweep"]
    assert pos["simlab.engine.records"] < pos["simlab.engine.results"]


def test_imports_inside_functions_say_why():
    """An import inside a function in the engine carries a comment saying why (it
    breaks a cycle, or defers a heavy or optional dependency)."""
    bad = []
    for package in ("simlab.engine",):
        for name, path in modules(package).items():
            lines = path.read_text().splitlines()
            tree = ast.parse("\n".join(lines))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        text = lines[sub.lineno - 1] + " " + lines[sub.lineno - 2]
                        if not any(m in text for m in DEFERRED_MARKS):
                            bad.append(f"{name}:{sub.lineno}: {lines[sub.lineno - 1].strip()}")
    assert not bad, "\n".join(sorted(set(bad)))
