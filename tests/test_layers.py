"""The package's layers as docs/design.md ("Layout of the package") states them, read from the
source (the ast walk of tests/import_graph.py, which counts imports inside functions and leaves
out those under `if TYPE_CHECKING:`, which never run): every import points down the layers of
LAYERS, no module graph has a circle anywhere in simlab, an import inside a function only defers
a heavy dependency and says so, and what the engine knows of the physics is exactly what
simlab/engine/__init__.py says."""

from __future__ import annotations

import pytest
from import_graph import LAYERS, graph, imports, layer, modules

# What the engine may import from outside itself (simlab/engine/__init__.py): the generic
# pieces, the config's spec tables and knob registry, the default lab and the weight source.
ENGINE_MAY_IMPORT = {
    "simlab.errors",
    "simlab.validate",
    "simlab.registry",
    "simlab.plugins",
    "simlab.core.spec",
    "simlab.core.knobs",
    "simlab.core.lab",
    "simlab.checkpoints.source",
    "simlab.checkpoints.checkpoint",
}
DEFERRED_MARK = "# deferred:"
# layers that defer nothing of simlab (their function-level imports would hide a circle)
NEVER_DEFER = ("errors", "registry", "validate", "core", "theory", "checkpoints", "plugins")


def test_every_package_has_a_layer():
    tops = {layer(n) for n in modules("simlab") if n != "simlab"}
    assert tops == set(LAYERS), f"packages without a layer: {tops - set(LAYERS)}"


def test_every_import_points_down():
    """An import (inside a function too) goes to a lower layer or stays in its package: core
    imports nothing above it, checkpoints nothing of the engine, the engine no study."""
    bad = []
    for name, path in modules("simlab").items():
        if name == "simlab":
            continue
        for target, line, _ in imports(path):
            if target == "simlab" or layer(target) == layer(name):
                continue
            if LAYERS[layer(target)] >= LAYERS[layer(name)]:
                bad.append(f"{name}:{line} imports {target} (layer {layer(target)})")
    assert not bad, "\n".join(bad)


def test_engine_imports_only_what_it_declares():
    """No engine module imports studies, cli, plot, theory or a core module other than the
    config's specs, the knob registry and the default lab, or of checkpoints other than the
    weight source."""
    bad = []
    for name, path in modules("simlab.engine").items():
        for target, line, _ in imports(path):
            if target.startswith("simlab.engine") or target in ENGINE_MAY_IMPORT:
                continue
            bad.append(f"{name}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_circle_anywhere():
    """The module graph of all of simlab (imports at any depth, inside functions too) is
    acyclic: a topological order exists."""
    g = graph()
    order, seen, stack = [], set(), set()

    def walk(n, path):
        if n in stack:
            pytest.fail("import circle: " + " -> ".join(path[path.index(n) :] + [n]))
        if n in seen:
            return
        stack.add(n)
        for m in sorted(g[n]):
            walk(m, path + [n])
        stack.discard(n)
        seen.add(n)
        order.append(n)

    for n in sorted(g):
        walk(n, [])
    # the plain sweep lies below growth and its parts; the entry chooses between them
    pos = {n: i for i, n in enumerate(order)}
    assert pos["simlab.engine.plain"] < pos["simlab.engine.parts"] < pos["simlab.engine.grow"]
    assert pos["simlab.engine.grow"] < pos["simlab.engine.sweep"]
    assert pos["simlab.engine.records"] < pos["simlab.engine.results"]
    # core's specs validate against the registries, which never need the specs at run time
    assert pos["simlab.core.block"] < pos["simlab.core.spec"]
    assert pos["simlab.core.inputs"] < pos["simlab.core.spec"]
    assert pos["simlab.core.knobs"] < pos["simlab.core.inputs"]


def test_the_circle_finder_sees_a_circle(tmp_path):
    """The walk above fails on a circle: two modules importing each other inside functions."""
    (tmp_path / "a.py").write_text("def f():\n    from simlab.b import x\n")
    found = imports(tmp_path / "a.py")
    assert found == [("simlab.b", 2, True)]
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from simlab.d import y\n"
    )
    assert imports(tmp_path / "c.py") == []  # never runs: not an edge


def test_imports_inside_functions_only_defer_and_say_why():
    """An import of simlab inside a function defers a heavy dependency (jax for the CLI's
    start, matplotlib for figures) and says so: "# deferred:" on its line, or on a comment
    line heading the run of imports it belongs to. The lower layers defer nothing."""
    bad = []
    for name, path in modules("simlab").items():
        lines = path.read_text().splitlines()
        for _, line, in_function in imports(path):
            if not in_function:
                continue
            if name != "simlab" and layer(name) in NEVER_DEFER:
                bad.append(f"{name}:{line}: {lines[line - 1].strip()} (this layer defers nothing)")
                continue
            i = line - 1
            while i >= 0 and DEFERRED_MARK not in lines[i]:
                above = lines[i - 1].strip() if i > 0 else ""
                if not (above.startswith(("from ", "import ", "#", ")")) or above.endswith(",")):
                    break
                i -= 1
            if i < 0 or DEFERRED_MARK not in lines[i]:
                bad.append(f"{name}:{line}: {lines[line - 1].strip()}")
    assert not bad, "\n".join(sorted(set(bad)))
