"""M2, the simlab side: the counterfactual sweep of experiments/smollm2_counterfactual.py (issue 51,
item 4) on a trained causal decoder, timed (docs/performance.md, "M2: the decoder study's
counterfactual sweep").

Per window set (B x T token ids), with the study's own programs (`study`: its `prepare`,
`run_layer`, `layer_program`, `upper_program` and `measures`, loaded from the checkout's
experiments/ folder, so the benchmark times the code the study runs):
  inputs   the studied layers' inputs: the checkpoint's embeddings through the layers below
           each, one compiled call per stretch between two studied layers
           (simlab.checkpoints.checkpoint.run: the weights its arguments);
  points   per studied layer, `run_layer`: the study's conditions (trained, the causal uniform
           clamp, the sink clamp, lambda 0.5 and 2 on the layer's queries and keys, the massive
           activation removed from its input where it has massive dims), each group of one
           pattern vmapped through the layer, then through the layers above it (the "last"
           read), the study's measures at both reads and the per-head sink mass and entropy.
Values: (layers, conditions, reads, measures) and (layers, conditions, head stats, heads), NaN
where a condition is not defined (no massive dims). The massive dims are the study's calibrated
ones (its meta.json) or declared (the --quick fixture has no massive activation: its dims are
set to exercise the intervention). The HF peer (simlab.studies.bench.hf_decoder) computes the
same values on the same ids.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from simlab.checkpoints import load, models
from simlab.checkpoints.checkpoint import run as run_layers
from simlab.errors import ConfigError
from simlab.studies.bench import hf_decoder
from simlab.studies.bench.flops import live_flops
from simlab.studies.bench.workloads import ROOT

STUDY = ROOT / "experiments" / "smollm2_counterfactual.py"
STUDY_META = ROOT / "figures" / "data" / "smollm2_counterfactual" / "meta.json"


def gguf_path(source: str) -> Path:
    """The .gguf file of a model of simlab.checkpoints.models.MODELS, or a path (relative: to
    the checkout)."""
    if source in models.MODELS:
        return models.find(source)
    path = Path(source)
    return path if path.is_absolute() else ROOT / path


@functools.lru_cache(maxsize=1)
def study():
    """experiments/smollm2_counterfactual.py as a module (its conditions checked against the
    peer's: the two sides fill the same table)."""
    if not STUDY.is_file():
        raise ConfigError(f"bench M2: {STUDY} is not in this checkout (M2 runs from a checkout)")
    spec = importlib.util.spec_from_file_location("smollm2_counterfactual", STUDY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert tuple(mod.CONDITIONS) == hf_decoder.CONDITIONS, mod.CONDITIONS
    assert tuple(m for m, _ in mod.MEASURES) == hf_decoder.MEASURES, mod.MEASURES
    return mod


def massive_dims(massive, layers) -> dict[int, tuple[int, ...] | None]:
    """Each layer's massive dims: "study", the study's calibration (its meta.json,
    calibration.massive_dims), or a table {layer: dims} (a layer absent: None, no condition)."""
    if massive == "study":
        if not STUDY_META.is_file():
            raise ConfigError(f"bench M2: {STUDY_META} (the study's calibration) is missing")
        massive = json.loads(STUDY_META.read_text())["calibration"]["massive_dims"]
    dims = {int(k): (None if v is None else tuple(int(d) for d in v)) for k, v in massive.items()}
    return {layer: dims.get(layer) for layer in layers}


def windows(vocab: int, batch: int, length: int, n: int, seed: int = 0) -> list[np.ndarray]:
    """n window sets of (batch, length) int32 token ids, uniform over the vocabulary (numpy
    Generator(seed)); the sweep's cost does not depend on which ids."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, (batch, length)).astype(np.int32) for _ in range(n)]


class Sweep:
    """The study's sweep of `layers` of checkpoint `ck`; `values(ids)` -> (values, heads)."""

    def __init__(self, ck, layers, dims):
        self.ck, self.layers, self.dims = ck, tuple(sorted(layers)), dims
        self.study = study()
        self.progs, self.weights = self.study.prepare(ck, self.layers)

    def inputs(self, ids) -> dict[int, jax.Array]:
        """Each studied layer's input on ids (the embeddings through the layers below)."""
        x, prev, out = self.ck.embed(jnp.asarray(ids)), 0, {}
        for layer in self.layers:
            x = run_layers(self.ck, x, range(prev, layer))
            out[layer], prev = x, layer
        return jax.block_until_ready(out)

    def points(self, xs, progs=None) -> tuple[np.ndarray, np.ndarray]:
        """The study's run_layer on each studied layer's input (stacked over layers)."""
        progs = self.progs if progs is None else progs
        got = [
            self.study.run_layer(self.ck, layer, xs[layer], self.dims[layer], progs, self.weights)
            for layer in self.layers
        ]
        return np.stack([v for v, _ in got]), np.stack([h for _, h in got])

    def values(self, ids):
        return self.points(self.inputs(ids))

    def flops_per_window(self, ids) -> dict[str, int]:
        """dot_general FLOPs of one window set, counted from the traced programs
        (simlab.studies.bench.flops.live_flops): the layers below each studied one, and every
        call of the study's programs (each counted as it is called); "total" their sum."""
        x, prev, below = self.ck.embed(jnp.asarray(ids)), 0, 0
        for layer in self.layers:
            if layer > prev:
                stretch = range(prev, layer)
                below += live_flops(lambda x, r=stretch: run_layers(self.ck, x, r), x)
            x, prev = run_layers(self.ck, x, range(prev, layer)), layer
        counted = [0]

        class Counted:
            def __init__(self, f):
                self.f = f

            def __call__(self, *args):
                counted[0] += live_flops(self.f, *args)
                return self.f(*args)

        progs = {k: Counted(f) for k, f in self.progs.items()}
        self.points(self.inputs(ids), progs)
        return {"lower_layers": below, "points": counted[0], "total": below + counted[0]}


class _CompileClock:
    """Seconds JAX spends tracing, lowering and compiling (jax.monitoring's compile events)
    while it is on."""

    def __init__(self):
        self.on, self.seconds = False, 0.0
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, event: str, duration: float, **kwargs) -> None:
        if self.on and event.startswith("/jax/core/compile/"):
            self.seconds += duration


def run(source: str, layers, massive, batch: int, length: int, n_windows: int,
        repeats: int = 2, count_flops: bool = True) -> dict:  # fmt: skip
    """Time the simlab side: load (the checkpoint read), the first window set (its programs
    compiled on first use: `compile_s` the seconds JAX's compile events report within it), then
    `repeats` passes over every window set (inputs, then points), the best pass the steady
    state. Returns the seconds, the FLOPs of one window set (count_flops; else None) and the
    values of the last pass."""
    t0 = time.perf_counter()
    ck = load(gguf_path(source))
    wins = windows(ck.vocab, batch, length, n_windows)
    dims = massive_dims(massive, layers)
    t1 = time.perf_counter()
    clock = _CompileClock()
    clock.on = True
    sweep = Sweep(ck, layers, dims)
    sweep.values(wins[0])
    clock.on = False
    t2 = time.perf_counter()
    passes = []
    for _ in range(max(1, repeats)):
        inputs_s = points_s = 0.0
        vals, heads = [], []
        for ids in wins:
            a = time.perf_counter()
            xs = sweep.inputs(ids)
            b = time.perf_counter()
            v, h = sweep.points(xs)
            vals.append(v)
            heads.append(h)
            inputs_s += b - a
            points_s += time.perf_counter() - b
        passes.append({"inputs_s": inputs_s, "points_s": points_s, "total_s": inputs_s + points_s})
    # after the timed work: nothing traced ahead of it
    flops = sweep.flops_per_window(wins[0]) if count_flops else None
    best = min(passes, key=lambda p: p["total_s"])
    return {
        "layers": list(sweep.layers),
        "massive_dims": {str(k): (None if v is None else list(v)) for k, v in dims.items()},
        "load_s": t1 - t0,
        "first_window_s": t2 - t1,
        "compile_s": clock.seconds,
        "passes": passes,
        "steady_s": best["total_s"],
        "inputs_s": best["inputs_s"],
        "points_s": best["points_s"],
        "n_windows": n_windows,
        "flops_per_window": flops,
        "values": np.stack(vals).tolist(),
        "heads": np.stack(heads).tolist(),
        "dtype": str(jnp.zeros(()).dtype),
    }
