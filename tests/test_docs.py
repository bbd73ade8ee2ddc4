"""The documentation stays one copy that matches the code: every registry entry is in the
config reference, every citation of a docs page names a page and section that exist, and the
README stays a front page whose links resolve."""

from __future__ import annotations

import json
import re
from pathlib import Path

import import_graph
import pytest

from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.knobs import KNOBS
from simlab.core.metrics import METRICS
from simlab.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
CITE = re.compile(r'docs/(\w+)\.md(?:,\s+"([^"]+)")?')


def _headings(page: Path) -> list[str]:
    return [l.lstrip("#").strip() for l in page.read_text().splitlines() if l.startswith("#")]


def test_config_reference_names_every_registry_entry():
    text = (ROOT / "docs" / "config.md").read_text()
    for registry in (BLOCKS, INPUTS, KNOBS, METRICS):  # simlab's own (a plugin documents its own)
        missing = [n for n in registry if registry.source(n) == BUILTIN and f"`{n}`" not in text]
        assert not missing, f"docs/config.md does not document {missing}"


def test_every_cited_docs_page_and_section_exists():
    cited = 0
    for path in [*ROOT.glob("simlab/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        text = " ".join(path.read_text().split())  # citations may wrap across lines
        for page, section in CITE.findall(text):
            doc = ROOT / "docs" / f"{page}.md"
            assert doc.is_file(), f"{path.relative_to(ROOT)} cites missing docs/{page}.md"
            if section:
                heads = [" ".join(h.split()) for h in _headings(doc)]
                assert any(h.startswith(section) for h in heads), (
                    f"{path.relative_to(ROOT)} cites docs/{page}.md, {section!r}: no such section"
                )
            cited += 1
    assert cited > 20  # the docstrings do cite the pages


def test_design_pictures_are_drawn_from_the_code():
    """docs/design.md's layer and engine pictures are what tests/import_graph.py draws from
    today's imports (run `python tests/import_graph.py` after moving an import or a module)."""
    text = (ROOT / "docs" / "design.md").read_text()
    assert import_graph.render(text) == text, "run: python tests/import_graph.py"


def test_readme_numbers_are_printed_from_the_data():
    """README.md's wall times and performance tables (and docs/performance.md's M1 row) are what
    experiments/readme_numbers.py prints from the committed meta.json files and benchmark JSON,
    character for character;
    the wall times are the meta.json sums (a grown sweep counted once, by its own meta.json)."""
    from conftest import experiment_script

    script = experiment_script("readme_numbers")
    text = (ROOT / "README.md").read_text()
    assert script.render(text, script.main()) == text, "run: python experiments/readme_numbers.py"
    perf = script.PERFORMANCE.read_text()
    assert script.render(perf, script.docs_blocks(), script.PERFORMANCE) == perf
    total, n = script.wall_time(ROOT / "figures" / "data" / "paper_refined")
    meta = json.loads((ROOT / "figures" / "data" / "paper_refined" / "meta.json").read_text())
    assert (total, n) == (meta["wall_time_s"], 1)
    assert script._duration(3 * 3600 + 7 * 60 + 59) == "3 h 7 min"
    assert script._duration(21 * 60 + 41.4) == "21 min 41 s" and script._duration(54) == "54 s"


@pytest.mark.parametrize(
    "block, flags",
    [("geometry", []), ("referee-geometry", ["--referee"])],
)
def test_gallery_geometry_blocks_are_printed_from_the_data(block, flags):
    """docs/gallery.md's "The answer, by geometry" and "The referee's questions, by geometry"
    blocks are what their begin markers' command prints from the committed data, character for
    character (the covariance measures at their n and d, against their isotropic references,
    and the one block both sections judge compared at its two n)."""
    from conftest import doc_block, experiment_script

    script = experiment_script("gallery_geometry")
    text = (ROOT / "docs" / "gallery.md").read_text()
    marker = f"<!-- {block}:begin (python experiments/gallery_geometry.py "
    assert marker + " ".join([*flags, "figures/data;"]) in text, "the marker names its command"
    run = script.referee if flags else script.main
    assert doc_block(text, block) == run(ROOT / "figures" / "data"), (
        f"run: python experiments/gallery_geometry.py {' '.join(flags)} figures/data"
    )


def _rows(picture: str) -> dict[str, int]:
    """module -> its row in an engine picture (its continuation lines skipped)."""
    out = {}
    for line in picture.splitlines():
        words = line.split()
        if words[0].isdigit():
            out[words[1]] = int(words[0])
    return out


def test_the_pictures_follow_the_imports():
    """The drawing is of the graph it is given: every engine module is drawn above every engine
    module it imports, a made-up import lifts a module's row, a circle is refused, and a
    package's modules come after those they import."""
    g = import_graph.graph()
    eng = import_graph.children(g, "simlab.engine")
    rows = _rows(import_graph.engine_picture(g))
    assert set(rows) == {m.rsplit(".", 1)[1] for m in eng}
    for m, targets in eng.items():
        assert all(rows[m.rsplit(".", 1)[1]] > rows[t.rsplit(".", 1)[1]] for t in targets), m
    moved = {k: set(v) for k, v in g.items()}
    moved["simlab.engine.covariates"].add("simlab.engine.config")  # a made-up import
    assert _rows(import_graph.engine_picture(moved))["covariates"] == rows["config"] + 1
    moved["simlab.engine.config"].add("simlab.engine.covariates")  # and a circle
    with pytest.raises(ValueError, match="import circle"):
        import_graph.engine_picture(moved)
    for package in ("simlab.core", "simlab.engine", "simlab.checkpoints"):
        kids = import_graph.children(g, package)
        order = import_graph.bottom_up(kids)
        assert all(order.index(t) < order.index(m) for m in kids for t in kids[m]), package


def test_readme_is_a_front_page_with_live_links():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links
    for link in links:
        assert (ROOT / link).exists(), f"README links to missing {link}"
    for page in ("design", "config", "extending", "theory", "training", "performance"):
        assert f"docs/{page}.md" in text
    # exactly two set-up commands (one code block each) in the Set up section
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert setup.count("```bash") == 2


DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "examples" / "plugins" / "README.md",
    *sorted((ROOT / "experiments").glob("*.toml")),
    *sorted((ROOT / "examples" / "plugins").glob("*.toml")),
]
MODULE = re.compile(r"\bsimlab(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FILE = re.compile(
    r"(?<![\w/.-])((?:simlab|docs|experiments|tests|benchmarks|examples|figures)/[\w./-]+"
    r"\.(?:py|md|toml|png|json|sh))"
)
COMMAND = re.compile(r"(?:^[#\s]*|&&\s*|\|\s*|\$\s*)simlab ([a-z][a-z-]+)([^`\n]*)")


def _resolves(dotted: str) -> bool:
    """simlab.a.b.C: an importable module, or an attribute of the longest importable prefix."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_and_file_the_docs_cite_exists():
    """Every `simlab.x.y` named in the README, docs/, the shipped TOMLs and the example plugin
    resolves (module or attribute), and every repository file path they name exists."""
    bad, seen = [], 0
    for doc in DOCS:
        text = doc.read_text()
        for dotted in set(MODULE.findall(text)):
            dotted = dotted.rstrip(".")
            seen += 1
            if not _resolves(dotted):
                bad.append(f"{doc.relative_to(ROOT)}: {dotted}")
        for path in set(FILE.findall(text)):
            seen += 1
            if "<" in path or "*" in path or "{" in path:
                continue
            if not (ROOT / path.rstrip(".")).exists():
                bad.append(f"{doc.relative_to(ROOT)}: {path}")
    assert seen > 50 and not bad, bad


def _code(doc: Path) -> list[str]:
    """The code of a doc: fenced blocks and `spans` of Markdown, comment lines of TOML."""
    text = doc.read_text()
    if doc.suffix == ".toml":
        return [ln for ln in text.splitlines() if ln.lstrip().startswith("#")]
    out, fenced = [], False
    for ln in text.splitlines():
        if ln.lstrip().startswith("```"):
            fenced = not fenced
            continue
        out += [ln] if fenced else re.findall(r"`([^`]+)`", ln)
    return out


def test_every_command_and_flag_the_docs_cite_exists():
    """Every `simlab COMMAND --flag` in the docs' code names a command and flags it accepts."""
    from simlab.cli import COMMANDS, build_parser

    bad, seen = [], 0
    for doc in DOCS:
        for line in _code(doc):
            for cmd, rest in COMMAND.findall(line):
                if cmd not in COMMANDS:
                    bad.append(f"{doc.relative_to(ROOT)}: simlab {cmd}")
                    continue
                seen += 1
                parser = build_parser([cmd])
                sub = parser._subparsers._group_actions[0].choices[cmd]
                known = {o for a in sub._actions for o in a.option_strings}
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
                    if flag not in known:
                        bad.append(f"{doc.relative_to(ROOT)}: simlab {cmd} {flag}")
    assert seen > 20 and not bad, bad


def test_setup_and_ci_install_the_pinned_versions_the_records_were_made_with():
    """README's two set-up commands and CI install from constraints.txt, which pins every
    version that a committed run's meta.json records (jax, jaxlib, numpy)."""
    import json

    pins = dict(
        l.split("==") for l in (ROOT / "constraints.txt").read_text().splitlines() if "==" in l
    )
    setup = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [b.split("```", 1)[0] for b in setup.split("```bash")[1:]]
    assert len(commands) == 2 and all("-c constraints.txt" in c for c in commands)
    ci = (ROOT / ".ci" / "run").read_text()
    assert all("-c constraints.txt" in l for l in ci.splitlines() if "pip install" in l)
    metas = list((ROOT / "figures").glob("**/meta.json"))
    assert metas
    for meta in metas:
        versions = json.loads(meta.read_text()).get("versions", {})
        for name in ("jax", "jaxlib", "numpy"):
            assert versions.get(name) == pins[name], f"{meta.relative_to(ROOT)}: {name}"


def test_printed_blocks_are_replaced_between_their_markers_only():
    """simlab.studies.table.replace_blocks (README's numbers, the performance tables, the
    design pictures): the body between one begin and one end marker is replaced, the rest of
    the text kept byte for byte; a missing or repeated marker names the file."""
    from simlab.studies.table import replace_blocks

    mark = "(python x.py)"
    text = f"a\n<!-- n:begin {mark} -->\nold\n<!-- n:end -->\nb\n"
    assert replace_blocks(text, {"n": "new\n"}, mark, "doc.md") == text.replace("old", "new")
    with pytest.raises(ValueError, match="doc.md: needs one <!-- m:begin"):
        replace_blocks(text, {"m": "x\n"}, mark, "doc.md")
    with pytest.raises(ValueError, match="doc.md: needs one"):
        replace_blocks(text + text, {"n": "x\n"}, mark, "doc.md")


def test_gallery_carries_the_decoder_study_printed_from_its_data():
    """docs/gallery.md's "On a trained decoder" block is what experiments/smollm2_verdicts.py
    prints from the committed figures/data/smollm2_counterfactual, character for character."""
    from conftest import doc_block, experiment_script

    script = experiment_script("smollm2_verdicts")
    got = script.block(ROOT / "figures" / "data")
    text = (ROOT / "docs" / "gallery.md").read_text()
    assert doc_block(text, script.BLOCK) == got, (
        "run: python experiments/smollm2_verdicts.py --write"
    )


def test_gallery_carries_the_llama_reading_printed_from_its_data():
    """docs/gallery.md section 9's block is what experiments/gallery_llama.py prints from the
    committed figures/data/paper_llama, character for character; its first-below-the-contour
    cells are the grid's own (independently: the first lambda whose seed-mean entropy is
    below 0.5, read from the stored per-seed values with numpy)."""
    import numpy as np

    import simlab

    from conftest import doc_block, experiment_script

    script = experiment_script("gallery_llama")
    got = script.block(ROOT / "figures" / "data")
    text = (ROOT / "docs" / "gallery.md").read_text()
    assert doc_block(text, script.BLOCK) == got, "run: python experiments/gallery_llama.py --write"
    r = simlab.load(ROOT / "figures" / "data" / "paper_llama")
    h = np.asarray(r.metrics["attn_entropy"], np.float64).mean(-1)  # (N, lambda, seed) -> mean
    g = np.asarray(r.metrics["out_cos_gain"], np.float64).mean(-1)
    for n, _, (lam, hj, gj, _), _ in script.rows(ROOT / "figures" / "data"):
        i = int(np.flatnonzero(r.axes["drift_norm"] == n)[0])
        j = int(np.flatnonzero(h[i] < 0.5)[0])
        assert r.axes["lambda"][j] == lam and abs(h[i, j] - hj) < 1e-6 and abs(g[i, j] - gj) < 1e-6
        assert (h[i, :j] >= 0.5).all()
