"""A checkpoint on disk in HuggingFace's layout: where it is, its config and its tensors.

Accepted paths (nothing is ever downloaded):
  a directory holding config.json and the weights (what `save_pretrained` or
      `huggingface-cli download ... --local-dir DIR` writes);
  a snapshot of the HF cache, models--org--name/snapshots/<rev>/ (its files are links into
      ../../blobs), or the cache's models--org--name/ itself (the revision refs/main names, or
      the only snapshot).
Weights: model.safetensors, or shards listed in model.safetensors.index.json (read with the
`safetensors` package into numpy, no torch needed; bfloat16 tensors are widened to float32),
else pytorch_model.bin (only where torch is installed). The file hashes (sha256 of config.json
and every weight file) name the checkpoint in a sweep's fingerprint.
"""

from __future__ import annotations

import hashlib
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
    HF cache model directory models--org--name)."""
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{where}: {str(p)!r} does not exist (nothing is downloaded)")
    if not p.is_dir():
        raise ConfigError(f"{where}: {str(p)!r} is not a directory (give the checkpoint's folder)")
    if (p / CONFIG).is_file():
        return p
    snaps = p / "snapshots"
    if p.name.startswith("models--") and snaps.is_dir():
        ref = p / "refs" / "main"
        if ref.is_file() and (snaps / ref.read_text().strip() / CONFIG).is_file():
            return snaps / ref.read_text().strip()
        found = sorted(s for s in snaps.iterdir() if (s / CONFIG).is_file())
        if len(found) == 1:
            return found[0]
        if found:
            raise ConfigError(
                f"{where}: {str(p)!r} holds {len(found)} snapshots and no refs/main; give one of "
                f"{', '.join(str(s) for s in found)}"
            )
    raise ConfigError(f"{where}: no {CONFIG} in {str(p)!r} (not a HuggingFace checkpoint folder)")


def read_config(folder: pathlib.Path) -> dict:
    """config.json as a dict; a ConfigError naming the file if it is not a JSON object."""
    f = folder / CONFIG
    try:
        cfg = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{f}: cannot be read as JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{f}: must hold a JSON object, got {type(cfg).__name__}")
    return cfg


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


def _safetensors_header(f: pathlib.Path) -> tuple[dict, int]:
    with open(f, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise ConfigError(f"{f}: not a safetensors file (shorter than its header)")
        (n,) = struct.unpack("<Q", raw)
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ConfigError(f"{f}: not a safetensors file (unreadable header)") from None
    header.pop("__metadata__", None)
    return header, 8 + n


def _read_safetensors(f: pathlib.Path) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    header, start = _safetensors_header(f)
    out = {}
    with safe_open(str(f), framework="np") as fh:
        for name, info in header.items():
            if info.get("dtype") == "BF16":  # numpy has no bfloat16: the raw bits, widened
                lo, hi = info["data_offsets"]
                with open(f, "rb") as raw:
                    raw.seek(start + lo)
                    bits = np.frombuffer(raw.read(hi - lo), "<u2").astype(np.uint32) << 16
                out[name] = bits.view(np.float32).reshape(info["shape"])
            else:
                out[name] = fh.get_tensor(name)
    return out


def _read_torch(f: pathlib.Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise ConfigError(
            f"{f}: reading pytorch_model.bin needs torch (pip install torch); or convert the "
            "checkpoint to model.safetensors"
        ) from None
    state = torch.load(f, map_location="cpu", weights_only=True)
    return {
        k: (v.float() if v.dtype == torch.bfloat16 else v).detach().numpy()
        for k, v in state.items()
    }


def read_tensors(folder: pathlib.Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(name -> numpy array, name -> the file it came from) over every weight file."""
    tensors, origin = {}, {}
    for f in weight_files(folder):
        try:
            part = _read_torch(f) if f.name.endswith(".bin") else _read_safetensors(f)
        except ConfigError:
            raise
        except Exception as e:  # a corrupt file: whatever the reader raised, in one line
            raise ConfigError(f"{f}: cannot be read ({type(e).__name__}: {e})") from None
        tensors.update(part)
        origin.update(dict.fromkeys(part, f.name))
    return tensors, origin


def sha256(f: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hashes(folder: pathlib.Path) -> dict[str, str]:
    """file name -> sha256 of config.json and every weight file: the checkpoint's identity."""
    return {f.name: sha256(f) for f in [folder / CONFIG, *weight_files(folder)]}
