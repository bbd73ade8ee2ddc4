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
