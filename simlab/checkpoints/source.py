"""The weight source: a [checkpoint] table -> the BlockSpec of its layers and the Weights a Lab
runs (docs/checkpoints.md). It lies between core (which only ever sees `Weights`) and the
engine (which resolves the table once per sweep and builds Lab(weights=...)).

  spec = checkpoint_from_dict(table)            validated, nothing read
  spec, block, weights = resolve(spec, block)   every file read once (hashed as it is read):
                                                the spec with architecture and file hashes, the
                                                [block] table under the trained-weights rule
                                                (checkpoint.check_trained), the layers studied
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from simlab.checkpoints import corpus, files
from simlab.checkpoints.checkpoint import STUDY_FIELDS, Weights, check_trained, load
from simlab.core.spec import BlockSpec, InputSpec
from simlab.errors import ConfigError
from simlab.validate import check_fields, check_int


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """The [checkpoint] table: trained layers instead of drawn ones (docs/checkpoints.md).

    path: a HuggingFace checkpoint folder (or HF cache snapshot) on disk, never downloaded;
    layer: the first layer studied (block.depth consecutive layers from it); ids: a .npy file of
    token ids (batch, length) used for every seed (None: a trained input kind such as "tokens"
    draws them per seed). architecture, files: what the checkpoint is (its architecture, file
    name -> sha256 of config.json and the weights), filled in by `resolve` and recorded in the
    resolved config: files enter the fingerprint, so a sweep is never resumed on other weights;
    the path does not (a moved folder with the same files is the same checkpoint).
    """

    path: str = ""
    layer: int = 0
    ids: str | None = None
    architecture: str | None = None
    files: tuple[tuple[str, str], ...] | None = None

    def validate(self, where: str = "checkpoint") -> CheckpointSpec:
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError(f"{where}.path: must name a checkpoint folder, got {self.path!r}")
        check_int(f"{where}.layer", self.layer, 0, 1 << 16)
        if self.ids is not None and not isinstance(self.ids, str):
            raise ConfigError(f"{where}.ids: must be the path of a .npy file, got {self.ids!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "layer": self.layer}
        if self.ids is not None:
            out["ids"] = self.ids
        out["architecture"] = self.architecture
        out["files"] = None if self.files is None else dict(self.files)
        return out


def checkpoint_from_dict(d: Mapping[str, Any], where: str = "checkpoint") -> CheckpointSpec:
    """The [checkpoint] table validated (nothing is read: `resolve` reads the folder)."""
    d = dict(d)
    check_fields(where, d, [f.name for f in dataclasses.fields(CheckpointSpec)])
    if isinstance(d.get("files"), Mapping):
        d["files"] = tuple(sorted(d["files"].items()))
    return CheckpointSpec(**d).validate(where)


def resolve(
    spec: CheckpointSpec, block: Mapping[str, Any] | None, where: str = "checkpoint"
) -> tuple[CheckpointSpec, BlockSpec, Weights]:
    """Read the checkpoint once; return the spec with its architecture and file hashes (a
    recorded `files` that differs from the folder's is refused), the BlockSpec of its layers
    (the [block] table `block` sets only STUDY_FIELDS, checkpoint.check_trained) and the Weights
    of layers spec.layer .. spec.layer + depth - 1 with the fixed ids of spec.ids."""
    table = dict(block or {})
    check_fields("block", table, sorted(f.name for f in dataclasses.fields(BlockSpec)))
    ck = load(spec.path, f"{where}.path")
    hashes = tuple(sorted(ck.hashes.items()))
    if spec.files is not None and tuple(sorted(spec.files)) != hashes:
        changed = sorted(set(spec.files) ^ set(hashes))
        raise ConfigError(
            f"{where}.files: {changed[0][0]} of {ck.folder} is not the file this config was "
            "resolved with (another checkpoint, or changed weights)"
        )
    check_trained(ck.block_fields(), table, "block", ck.folder / files.CONFIG)
    spec_block = ck.block(**{k: table[k] for k in STUDY_FIELDS if k in table})
    ids = None
    if spec.ids is not None:
        try:
            ids = np.load(spec.ids)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{where}.ids: cannot read {spec.ids!r} ({e})") from None
    layers = list(range(spec.layer, spec.layer + spec_block.depth))
    resolved = dataclasses.replace(spec, architecture=ck.architecture, files=hashes)
    weights = dataclasses.replace(ck.at(layers, ids, f"{where}.layer"), source=resolved)
    return resolved, spec_block, weights


def resolve_text(inputs: InputSpec, weights: Weights | None, where: str = "inputs") -> InputSpec:
    """Inputs of kind "text" with their text_sha256: the sha256 of the corpus's content
    (simlab.checkpoints.corpus.identity: the files' bytes, or the standard library's Python
    version and folder) and of the checkpoint's tokenizer.json, which together make the windows.
    A recorded text_sha256 that differs (the corpus or the tokenizer changed since the config
    was resolved) is refused, as changed weights are. Other kinds: unchanged, and a corpus
    given to them (which they would ignore) refused."""
    if inputs.kind != "text":
        if inputs.corpus != corpus.STDLIB:
            raise ConfigError(
                f"{where}.corpus: {inputs.corpus!r} is read only by {where}.kind 'text', not "
                f"{inputs.kind!r}; set {where}.kind = 'text' or leave {where}.corpus out"
            )
        return inputs
    if weights is None:
        return inputs
    tokenizer = weights.checkpoint.tokenizer_text() or ""
    h = hashlib.sha256(corpus.identity(inputs.corpus).encode())
    h.update(hashlib.sha256(tokenizer.encode()).digest())
    sha = h.hexdigest()
    if inputs.text_sha256 is not None and inputs.text_sha256 != sha:
        raise ConfigError(
            f"{where}.text_sha256: the corpus {inputs.corpus!r} or the checkpoint's tokenizer.json "
            "is not the text this config was resolved with (changed since)"
        )
    return dataclasses.replace(inputs, text_sha256=sha)
