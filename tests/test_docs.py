"""The documentation stays one copy that matches the code: every registry entry is in the
config reference, every citation of a docs page names a page and section that exist, and the
README stays a front page whose links resolve."""

from __future__ import annotations

import re
from pathlib import Path

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
