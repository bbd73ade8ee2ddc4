"""The settings of a training-dynamics run (`TrainConfig`), the criteria its verdicts are
computed against (`Criteria`), and where both come from: experiments/train_dynamics.toml, a
[train] table (the documented run), [quick] overrides and a [criteria] table
(docs/training.md, "Verdicts: the criteria").
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simlab.core.spec import BlockSpec
from simlab.engine import records
from simlab.engine.config import experiments_dir
from simlab.engine.tomlio import read_config_toml
from simlab.errors import ConfigError
from simlab.studies.train_dynamics import corpus
from simlab.validate import check_fields, check_int, check_positive


@dataclasses.dataclass(frozen=True)
class Criteria:
    """Thresholds of the computed verdicts (docs/training.md, "Verdicts: the criteria").

    A seed *uses attention* when its final held-out loss is below the context-free loss by more
    than attention_margin nats. A head of a seed *drifts* when its |mq . mk| grows by at least
    drift_growth x from step 0 to the end and its |cos(mq, mk)| at the end is at least
    drift_cos; it *sharpens* when its normalised attention entropy at the end is at most
    sharp_entropy. A seed shows drift (sharpening) when one of its heads does; a corpus shows
    it ("yes") when every seed does, "no" when none does, else "inconsistent". The lab
    *predicts* a (checkpoint, layer) cell when |lab - measured| head-mean entropy <=
    loop_tolerance in every seed."""

    attention_margin: float = 0.1
    drift_growth: float = 10.0
    drift_cos: float = 0.8
    sharp_entropy: float = 0.5
    loop_tolerance: float = 0.05

    def validate(self) -> Criteria:
        check_positive("criteria.attention_margin", self.attention_margin, strict=False)
        check_positive("criteria.drift_growth", self.drift_growth, lo=1.0)
        for name in ("drift_cos", "sharp_entropy"):
            v = check_positive(f"criteria.{name}", getattr(self, name))
            if v > 1:
                raise ConfigError(f"criteria.{name}: {v} is outside the allowed range (0, 1]")
        check_positive("criteria.loop_tolerance", self.loop_tolerance)
        return self


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training-dynamics run depends on; the values (the documented run and the
    --quick overrides) and what each field means are in experiments/train_dynamics.toml
    (`load`). `corpus` is the corpus of one run; `corpora` the list the CLI runs; `vocab` the
    vocabulary of the synthetic corpora (the text corpus is bytes, 256)."""

    corpus: str
    corpora: tuple[str, ...]
    vocab: int
    zipf_s: float
    branches: int
    noise: float
    pairs: int
    period_min: int
    period_max: int
    text_heldout: float
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
    final_eval_batch: int
    seeds: int
    seed: int
    lab_seeds: int
    loop_checkpoints: int
    criteria: Criteria = Criteria()

    @property
    def model_vocab(self) -> int:
        """The vocabulary of this run's corpus: `vocab` for the synthetic ones, 256 for text
        (bytes)."""
        return 256 if corpus.CORPORA.get(self.corpus, ("",))[0] == "text" else self.vocab

    def corpus_spec(self) -> corpus.CorpusSpec:
        return corpus.CorpusSpec(
            self.corpus,
            self.model_vocab,
            self.zipf_s,
            self.branches,
            self.noise,
            self.pairs,
            self.period_min,
            self.period_max,
            self.text_heldout,
            self.seed,
        ).validate(self.context + 1)

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

    def validate(self) -> TrainConfig:
        """Every field against its allowed range (a ConfigError names it), before any work."""
        if not isinstance(self.corpora, tuple) or not self.corpora:
            raise ConfigError("train.corpora: must be a non-empty list of corpus names")
        for name in self.corpora + (self.corpus,):
            if name not in corpus.CORPORA:
                raise ConfigError(
                    f"train.corpora: {name!r} is not one of {', '.join(corpus.CORPORA)}"
                )
        check_int("train.context", self.context, 2, 1 << 14)
        check_int("train.batch", self.batch, 1, 1 << 14)
        check_int("train.steps", self.steps, 1, 1 << 24)
        check_positive("train.lr", self.lr)
        check_int("train.warmup", self.warmup, 0, 1 << 24)
        check_positive("train.weight_decay", self.weight_decay, strict=False)
        check_int("train.n_checkpoints", self.n_checkpoints, 2, 1000)
        check_int("train.eval_batch", self.eval_batch, 1, 1 << 12)
        check_int("train.final_eval_batch", self.final_eval_batch, 1, 1 << 14)
        check_int("train.seeds", self.seeds, 1, 1000)
        check_int("train.seed", self.seed, 0, 2**31 - 1)
        check_int("train.lab_seeds", self.lab_seeds, 1, 100)
        check_int("train.loop_checkpoints", self.loop_checkpoints, 2, self.n_checkpoints)
        for name in ("vocab", "pairs", "period_min", "period_max", "branches"):
            check_int(f"train.{name}", getattr(self, name), 1)
        for name in self.corpora:
            dataclasses.replace(self, corpus=name).corpus_spec()
        self.block_spec()
        self.criteria.validate()
        return self


def load(quick: bool = False, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """TrainConfig from experiments/train_dynamics.toml ([train], with [quick] applied when
    quick, and [criteria]), then `overrides` (field -> value), validated; an unknown field is a
    ConfigError."""

    path = experiments_dir() / "train_dynamics.toml"
    raw = read_config_toml(path)
    unknown = set(raw) - {"train", "quick", "criteria"}
    if unknown:
        raise ConfigError(
            f"{path}: {sorted(unknown)[0]}: unknown table; allowed: train, quick, criteria"
        )
    values = dict(raw.get("train", {}))
    if quick:
        values.update(raw.get("quick", {}))
    values.update(overrides or {})
    names = {f.name for f in dataclasses.fields(TrainConfig)} - {"criteria"}
    check_fields(f"{path}: train", values, sorted(names))
    crit = dict(raw.get("criteria", {}))
    check_fields(f"{path}: criteria", crit, sorted(f.name for f in dataclasses.fields(Criteria)))
    missing = names - set(values) - {"corpus"}
    if missing:
        raise ConfigError(f"{path}: train.{sorted(missing)[0]}: missing field")
    if isinstance(values.get("corpora"), list):
        values["corpora"] = tuple(values["corpora"])
    values.setdefault("corpus", values["corpora"][0] if values.get("corpora") else "zipf")
    try:
        cfg = TrainConfig(**values, criteria=Criteria(**crit))
    except TypeError as e:
        raise ConfigError(f"{path}: {e}") from None
    return cfg.validate()


def unknown_fields(config: dict[str, Any]) -> list[str]:
    """Dotted names of a stored training run's config fields (meta["config"]) that TrainConfig
    and its Criteria do not have."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    out = [k for k in config if k not in known]
    crit = config.get("criteria")
    if isinstance(crit, dict):
        fields = {f.name for f in dataclasses.fields(Criteria)}
        out += [f"criteria.{k}" for k in crit if k not in fields]
    return out


# a training run's meta.json has kind "train-dynamics": its config is judged by these fields
records.register_config_kind("train-dynamics", unknown_fields)
