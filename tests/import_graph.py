"""simlab's import graph, read from the source, and the two pictures of it in docs/design.md.

The one copy of the walk: an ast walk of every module that counts imports inside functions and
leaves out those under `if TYPE_CHECKING:` (they never run). tests/test_layers.py checks the
rules on it (imports point down the layers of LAYERS, no circle anywhere); this module draws
from it docs/design.md's layer picture ("Layout of the package": each package's modules bottom
up) and engine picture (each engine module on a row above every engine module it imports), and
writes them between the page's markers:

    python tests/import_graph.py           rewrite the pictures in docs/design.md
    python tests/import_graph.py --check   exit 1 when the committed pictures differ

tests/test_docs.py fails when the committed pictures drift from the code.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import textwrap
from pathlib import Path

from simlab.studies.table import replace_blocks

ROOT = Path(__file__).resolve().parents[1] / "simlab"
DESIGN = ROOT.parent / "docs" / "design.md"
# Each top-level package or module of simlab and its layer: an import goes to a lower layer or
# stays inside its own package (docs/design.md, "Layout of the package").
LAYERS = {
    "errors": 0,
    "aliases": 0,
    "registry": 1,
    "validate": 1,
    "core": 2,
    "theory": 2,
    "checkpoints": 3,
    "plugins": 3,
    "engine": 4,
    "plot": 5,
    "testing": 5,
    "studies": 6,
    "cli": 7,
    "__main__": 8,
}
WIDTH = 100  # the pictures' lines, like the code's


# ---------------------------------------------------------------------------- the walk
def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _type_checking(node) -> bool:
    t = node.test if isinstance(node, ast.If) else None
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported simlab module, line, inside a function) for each import of simlab in a file
    that runs (not under `if TYPE_CHECKING:`); `from simlab.engine import records` names
    simlab.engine.records. Each file is parsed once per process and version (the tests walk
    every module several times)."""
    path = Path(path)
    return list(_imports(path, path.stat().st_mtime_ns))


@functools.cache
def _imports(path: Path, mtime_ns: int) -> tuple[tuple[str, int, bool], ...]:
    tree = ast.parse(path.read_text())
    out = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
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
    return tuple((m, line, f) for m, line, f in out if m == "simlab" or m.startswith("simlab."))


def modules(package: str) -> dict[str, Path]:
    base = ROOT.parent / package.replace(".", "/")
    return {module_name(p): p for p in sorted(base.rglob("*.py"))}


def layer(module: str) -> str:
    return module.split(".")[1]


def graph() -> dict[str, set[str]]:
    """module -> the simlab modules it imports (at any depth, inside functions too)."""
    mods = modules("simlab")
    out = {}
    for n, p in mods.items():
        edges = set()
        for t, _, _ in imports(p):
            while t not in mods and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in mods and t not in (n, "simlab"):
                edges.add(t)
        out[n] = edges
    return out


# ---------------------------------------------------------------------------- the pictures
def heights(g: dict[str, set[str]]) -> dict[str, int]:
    """Each node's row: 0 when it imports none of the graph's nodes, else one above the highest
    node it imports (the graph must be acyclic: tests/test_layers.py)."""
    out: dict[str, int] = {}
    busy: set[str] = set()

    def h(n: str) -> int:
        if n not in out:
            if n in busy:
                raise ValueError(f"import circle through {n} (tests/test_layers.py names it)")
            busy.add(n)
            out[n] = 1 + max((h(m) for m in g[n]), default=-1)
        return out[n]

    for n in g:
        h(n)
    return out


def children(g: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph of a package's direct children (a module, or a subpackage with its modules
    folded in): child -> the children it imports."""
    depth = package.count(".") + 1

    def child(m: str) -> str | None:
        parts = m.split(".")
        if m == package or parts[:depth] != package.split("."):
            return None
        return ".".join(parts[: depth + 1])

    out: dict[str, set[str]] = {}
    for n, targets in g.items():
        c = child(n)
        if c is None:
            continue
        out.setdefault(c, set())
        out[c] |= {t for t in map(child, targets) if t not in (None, c)}
    return out


def bottom_up(g: dict[str, set[str]]) -> list[str]:
    """The nodes by row, lowest first (names in order within a row)."""
    h = heights(g)
    return sorted(g, key=lambda n: (h[n], n))


def summary(path: Path) -> str:
    """The first clause of a module's docstring: up to its first colon, parenthesis, dash or
    full stop."""
    doc = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
    head = re.split(r": | \(| — |\. |\.$", doc, maxsplit=1)[0]
    return head[0].lower() + head[1:] if head[:2].istitle() else head


def _short(module: str, package: str) -> str:
    name = module[len(package) + 1 :]
    is_package = (ROOT.parent / module.replace(".", "/")).is_dir()
    return name + "/" if is_package else name


def layer_picture(g: dict[str, set[str]] | None = None) -> str:
    """Every layer of LAYERS, top first, and each package's modules (subpackages folded in)
    bottom up: a module imports only modules left of it in its package, or lower layers."""
    g = graph() if g is None else g
    tops = sorted(LAYERS, key=lambda t: (-LAYERS[t], t))
    labels = {
        t: f"{LAYERS[t]}  simlab/{t}/" if (ROOT / t).is_dir() else f"{LAYERS[t]}  simlab/{t}.py"
        for t in tops
    }
    pad = 2 + max(map(len, labels.values()))
    lines = []
    for top in tops:
        if not (ROOT / top).is_dir():
            lines.append(labels[top])
            continue
        name = f"simlab.{top}"
        order = [_short(c, name) for c in bottom_up(children(g, name))]
        lines += textwrap.wrap(
            ", ".join(order),
            WIDTH - 4,
            initial_indent=f"{labels[top]:<{pad}}",
            subsequent_indent=" " * pad,
        )
    return "\n".join("    " + line for line in lines)


def engine_picture(g: dict[str, set[str]] | None = None) -> str:
    """The engine's modules, one row per height (the top first): each imports only modules on
    lower rows; each with the first clause of its docstring."""
    g = graph() if g is None else g
    eng = children(g, "simlab.engine")
    eng.pop("simlab.engine", None)
    h = heights(eng)
    mods = modules("simlab.engine")
    lines = []
    for row in range(max(h.values()), -1, -1):
        for m in sorted(n for n in eng if h[n] == row):
            head = f"{row:>2}  {_short(m, 'simlab.engine'):<14}"
            lines += textwrap.wrap(
                summary(mods[m]), WIDTH - 4, initial_indent=head, subsequent_indent=" " * 18
            )
    return "\n".join("    " + line for line in lines)


PICTURES = {"layers": layer_picture, "engine": engine_picture}
MARK = "(python tests/import_graph.py; do not edit by hand)"


def render(text: str, g: dict[str, set[str]] | None = None) -> str:
    """`text` (docs/design.md) with each picture between its markers drawn from the code."""
    g = graph() if g is None else g
    pictures = {name: f"\n{draw(g)}\n\n" for name, draw in PICTURES.items()}
    return replace_blocks(text, pictures, MARK, DESIGN)


def main(argv: list[str]) -> int:
    old = DESIGN.read_text()
    new = render(old)
    if "--check" in argv:
        if new != old:
            print(f"{DESIGN}: its pictures differ from the code; run python tests/import_graph.py")
            return 1
        return 0
    DESIGN.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
