"""A checkpoint on disk in HuggingFace's layout: where it is, its config and its tensors.

Accepted paths (nothing is ever downloaded):
  a directory holding config.json and the weights (what `save_pretrained` or
      `huggingface-cli download ... --local-dir DIR` writes);
  a snapshot of the HF cache, models--org--name/snapshots/<rev>/ (its files are links into
      ../../blobs), or the cache's models--org--name/ itself (the revision refs/main names, or
      the only snapshot).
Weights: model.safetensors, or shards listed in model.safetensors.index.json (parsed into numpy
from the file's bytes, no torch needed; bfloat16 tensors are widened to float32), else
pytorch_model.bin (only where torch is installed). `read` reads each file once and hashes the
bytes it parses: the file hashes (sha256 of config.json and every weight file) name the
checkpoint in a sweep's fingerprint.
"""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import struct

import numpy as np

from simlab.errors import ConfigError

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"


def locate(path, where: str = "checkpoint.path") -> pathlib.Path:
    """The directory holding config.json for `path` (a directory, an HF cache snapshot or an
    HF cache model directory models--org--name), absolute: every message about the
    checkpoint's files names them the same way whatever the route (a config file's relative
    path is made absolute, a --set or a dict's is not)."""
    p = pathlib.Path(path).expanduser()
    if p.is_symlink() and not p.exists():
        raise ConfigError(
            f"{where}: {str(p)!r} is a link to {str(p.readlink())!r}, which is missing"
        )
    if not p.exists():
        raise ConfigError(f"{where}: {str(p)!r} does not exist (nothing is downloaded)")
    if not p.is_dir():
        raise ConfigError(f"{where}: {str(p)!r} is not a directory (give the checkpoint's folder)")
    if (p / CONFIG).is_file():
        return p.absolute()
    p = p.absolute()
    snaps = p / "snapshots"
    if p.name.startswith("models--") and snaps.is_dir():
        ref = p / "refs" / "main"
        if ref.is_file():
            rev = ref.read_text().strip()
            if (snaps / rev / CONFIG).is_file():
                return snaps / rev
            raise ConfigError(
                f"{where}: {ref} names revision {rev!r}, which is not among the snapshots of "
                f"{str(p)!r} (with a {CONFIG}); give a snapshot folder, or fix refs/main"
            )
        found = sorted(s for s in snaps.iterdir() if (s / CONFIG).is_file())
        if len(found) == 1:
            return found[0]
        if found:
            raise ConfigError(
                f"{where}: {str(p)!r} holds {len(found)} snapshots and no refs/main; give one of "
                f"{', '.join(str(s) for s in found)}"
            )
    raise ConfigError(f"{where}: no {CONFIG} in {str(p)!r} (not a HuggingFace checkpoint folder)")


def parse_config(raw: bytes, f: pathlib.Path) -> dict:
    """config.json's bytes as a dict; a ConfigError naming the file if not a JSON object."""
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{f}: cannot be read as JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{f}: must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def _read_bytes(f: pathlib.Path) -> bytes:
    """A file's bytes, read once (every reader of a checkpoint goes through here)."""
    try:
        return f.read_bytes()
    except OSError as e:
        raise ConfigError(f"{f}: cannot be read ({e.strerror or e})") from None


def weight_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The weight files of a checkpoint folder, in reading order."""
    if (folder / SAFETENSORS).is_file():
        return [folder / SAFETENSORS]
    if (folder / INDEX).is_file():
        try:
            index = json.loads((folder / INDEX).read_text())["weight_map"]
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{folder / INDEX}: no readable weight_map ({e})") from None
        files = [folder / n for n in sorted(set(index.values()))]
        for f in files:
            if not f.is_file():
                raise ConfigError(f"{folder / INDEX}: lists {f.name!r}, which is missing")
        return files
    if (folder / TORCH_BIN).is_file():
        return [folder / TORCH_BIN]
    raise ConfigError(
        f"checkpoint.path: no {SAFETENSORS}, {INDEX} or {TORCH_BIN} in {str(folder)!r}"
    )


# safetensors dtype -> numpy (little-endian, as the format stores them); BF16 by hand below
SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}


def parse_safetensors(data: bytes, f: pathlib.Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file's bytes (8-byte little-endian header length, a JSON
    header name -> {dtype, shape, data_offsets}, then the data: huggingface/safetensors'
    format), as numpy arrays viewing the bytes; bfloat16 widened to float32 from its raw bits
    (numpy has no bfloat16)."""
    if len(data) < 8:
        raise ConfigError(f"{f}: not a safetensors file (shorter than its header)")
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{f}: not a safetensors file (unreadable header)") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{f}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    start, out = 8 + n, {}
    ends = [i["data_offsets"][1] for i in header.values() if _offsets(i)]
    if ends and start + max(ends) > len(data):
        raise ConfigError(_truncated(f, start + max(ends), len(data)))
    for name, info in header.items():
        try:
            dtype, shape, (lo, hi) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{f}: tensor {name!r} has no dtype, shape and offsets") from None
        np_dtype = np.dtype("<u2" if dtype == "BF16" else SAFETENSORS_DTYPES.get(dtype, "V1"))
        if np_dtype.kind == "V":
            raise ConfigError(f"{f}: tensor {name!r} has dtype {dtype}, which simlab cannot read")
        count = int(np.prod(shape, dtype=np.int64))
        if hi - lo != count * np_dtype.itemsize or lo < 0 or start + hi > len(data):
            raise ConfigError(f"{f}: tensor {name!r}: its offsets do not match shape {shape}")
        a = np.frombuffer(data, np_dtype, count=count, offset=start + lo)
        if dtype == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(shape)
    return out


def _offsets(info) -> bool:
    """Whether a header entry has two integer data_offsets."""
    o = info.get("data_offsets") if isinstance(info, dict) else None
    return isinstance(o, list) and len(o) == 2 and all(isinstance(x, int) for x in o)


def _truncated(f: pathlib.Path, need: int, have: int) -> str:
    """The refusal of a safetensors file cut short: what its header says, what it has."""
    return (
        f"{f}: the file is shorter than its header says (its tensors end at byte {need:,}, "
        f"the file has {have:,} bytes): it was cut short (an interrupted download or copy); "
        "fetch or copy it again"
    )


def parse_torch(data: bytes, f: pathlib.Path) -> dict[str, np.ndarray]:
    """The tensors of a pytorch_model.bin's bytes (needs torch)."""
    try:
        import torch  # deferred: torch is an optional dependency, for .bin checkpoints only
    except ImportError:
        raise ConfigError(
            f"{f}: reading pytorch_model.bin needs torch (pip install torch); or convert the "
            "checkpoint to model.safetensors"
        ) from None
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return {
        k: (v.float() if v.dtype == torch.bfloat16 else v).detach().numpy()
        for k, v in state.items()
    }


def read(folder: pathlib.Path):
    """Every file of a checkpoint read once: (config.json as a dict, name -> numpy tensor,
    name -> the file it came from, file name -> sha256 of config.json and every weight file,
    hashed from the same bytes that are parsed: the checkpoint's identity)."""
    raw = _read_bytes(folder / CONFIG)
    hashes = {CONFIG: hashlib.sha256(raw).hexdigest()}
    config = parse_config(raw, folder / CONFIG)
    tensors, origin = {}, {}
    for f in weight_files(folder):
        data = _read_bytes(f)
        hashes[f.name] = hashlib.sha256(data).hexdigest()
        try:
            part = parse_torch(data, f) if f.name.endswith(".bin") else parse_safetensors(data, f)
        except ConfigError:
            raise
        except Exception as e:  # a corrupt file: whatever the reader raised, in one line
            raise ConfigError(f"{f}: cannot be read ({type(e).__name__}: {e})") from None
        tensors.update(part)
        origin.update(dict.fromkeys(part, f.name))
    return config, tensors, origin, hashes


def read_tensors(folder: pathlib.Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(name -> numpy array, name -> the file it came from) over every weight file."""
    _, tensors, origin, _ = read(folder)
    return tensors, origin


def sha256(f: pathlib.Path) -> str:
    """The sha256 of one file, streamed (for a file on its own; `read` hashes what it parses)."""
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
