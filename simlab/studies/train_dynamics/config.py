"""The settings of a training-dynamics run (`TrainConfig`) and where its sizes come from:
experiments/train_dynamics.toml, a [train] table (the documented run) and [quick] overrides,
applied by the same function as every experiment's (simlab.engine.config.apply_quick).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simlab.core.spec import BlockSpec
from simlab.errors import ConfigError
from simlab.studies.train_dynamics import corpus


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training-dynamics run depends on; the values (the documented run and the
    --quick overrides) and what each field means are in experiments/train_dynamics.toml
    (`load`)."""

    corpus: str
    vocab: int
    zipf_s: float
    branches: int
    noise: float
    depth: int
    d_model: int
    n_heads: int
    context: int
    batch: int
    steps: int
    lr: float
    warmup: int
    weight_decay: float
    ln_eps: float
    n_checkpoints: int
    eval_batch: int
    seeds: int
    seed: int
    lab_seeds: int
    loop_checkpoints: int

    def corpus_spec(self) -> corpus.CorpusSpec:
        return corpus.CorpusSpec(
            self.corpus, self.vocab, self.zipf_s, self.branches, self.noise, self.seed
        ).validate()

    def block_spec(self) -> BlockSpec:
        return BlockSpec(
            kind="pre_ln",
            d_model=self.d_model,
            n_heads=self.n_heads,
            causal=True,
            depth=self.depth,
            init="bert",
            ln_eps=self.ln_eps,
        ).validate("train")


def load(quick: bool = False, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """TrainConfig from experiments/train_dynamics.toml ([train], with [quick] applied when
    quick), then `overrides` (field -> value); unknown fields are a ConfigError."""
    from simlab.engine.config import experiments_dir, read_toml

    path = experiments_dir() / "train_dynamics.toml"
    raw = read_toml(path)
    values = dict(raw.get("train", {}))
    if quick:
        values.update(raw.get("quick", {}))
    values.update(overrides or {})
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    for k in values:
        if k not in names:
            raise ConfigError(
                f"{path}: train.{k}: unknown field; allowed: {', '.join(sorted(names))}"
            )
    return TrainConfig(**values)
