"""The benchmark's workloads: P1-P5 (the engine against the PyTorch loop), W1-W4 (against
the JAX per-point loop) and M1 (simlab against the HF hooks peer on a trained layer), their
targets, and their configs at full and --quick sizes. The quick sizes are override tables
applied by the experiments' own function (simlab.engine.config.apply_quick's semantics: tables
update, nothing else changes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The checkout simlab runs from: a hooks workload's relative "source" folder and
# benchmarks/results are in it.
ROOT = Path(__file__).resolve().parents[3]

# Targets (ratios measured in the same run). P*: PyTorch wall / engine wall; M1: the HF hooks
# peer's steady state / simlab's (the whole-model peer: a hooked forward per point, as issue 38
# describes it; the layer-only peer is reported beside it); W3: the share of
# the matmul peak the paper-size BERT block executes in steady state; W4: peak memory of the
# 1e5-point grid over the 1e3-point grid; "cached compile": seconds a warm-cache sweep compiles.
TARGETS = {
    "P1": {"ratio": 4.0},
    "P2": {"ratio": 3.0},
    "P3": {"ratio": 2.0},
    "P4": {"ratio": 4.0},
    "P5": {},
    "W1": {"speedup": 3.0},
    "W2": {"speedup": 5.0},
    "W3": {"speedup": 1.3, "peak_fraction": 0.60},
    "W4": {"memory_ratio": 1.3},
    "M1": {"ratio": 3.0},
    "M2": {"ratio": 3.0},
}

CACHED_COMPILE_S = 0.3

_W1_BLOCK = {"kind": "attention", "d_model": 64, "n_heads": 4, "mlp": False}

_W1_INPUTS = {"kind": "embedding", "batch": 4, "length": 64}

_BERT = {"kind": "post_ln", "d_model": 768, "n_heads": 12, "mlp": True}

_ATTN = {"kind": "attention", "d_model": 768, "n_heads": 12, "mlp": False}

_PAPER_INPUTS = {"kind": "embedding", "batch": 16, "length": 512}


def _log_axis(name, start, stop, num):
    return {"name": name, "space": "log", "start": start, "stop": stop, "num": num}


_DRIFT8 = {"name": "drift_norm", "values": [0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]}

_PAPER_GRID = [_DRIFT8, _log_axis("q_scale", 0.25, 16.0, 8)]

# name -> description, config tables, loop subset (None: every point), W4 grid sizes.
WORKLOADS: dict[str, dict[str, Any]] = {
    "W1": {
        "title": "small attention-only (d 64, 4 heads, 4x64 tokens, 32x32 q_scale x "
        "temperature, 4 seeds)",
        "config": {
            "block": _W1_BLOCK,
            "inputs": _W1_INPUTS,
            "axes": [_log_axis("q_scale", 0.1, 10.0, 32), _log_axis("temperature", 0.1, 10.0, 32)],
            "sweep": {"seeds": 4, "micro_batch": 32},
        },
        "loop_points": None,
        "repeats": 3,
    },
    "W2": {
        "title": "paper-size attention-only (d 768, 12 heads, 16x512 tokens, 8x8 "
        "drift_norm x q_scale, 1 seed)",
        "config": {
            "block": _ATTN,
            "inputs": _PAPER_INPUTS,
            "axes": _PAPER_GRID,
            "sweep": {"seeds": 1, "micro_batch": 1},
        },
        "loop_points": 8,
        "repeats": 1,
    },
    "W3": {
        "title": "paper-size BERT block (post-LN + MLP, same inputs and grid)",
        "config": {
            "block": _BERT,
            "inputs": _PAPER_INPUTS,
            "axes": _PAPER_GRID,
            "sweep": {"seeds": 1, "micro_batch": 1},
        },
        "loop_points": 8,
        "repeats": 1,
    },
    "W4": {
        "title": "memory: W1's block on grids of 1e3 and 1e5 points (1 seed)",
        "config": {
            "block": _W1_BLOCK,
            "inputs": _W1_INPUTS,
            "axes": None,
            "sweep": {"seeds": 1, "micro_batch": 32},
        },
        "grids": {"1e3": (40, 25), "1e5": (400, 250)},
        "repeats": 1,
    },
}

# Engine vs the PyTorch loop: the paper's protocol (BERT init, embedding lookup + drift N, joint
# q/k scale lambda), metrics input/attn/out cos (+ within), attn_entropy, attn_max.
PEER_METRICS = [
    "input_cos",
    "input_cos_within",
    "attn_cos",
    "attn_cos_within",
    "out_cos",
    "out_cos_within",
    "attn_entropy",
    "attn_max",
]

_D256 = {"d_model": 256, "n_heads": 4}

_T256 = {"kind": "embedding", "batch": 8, "length": 256}

PEERS: dict[str, dict[str, Any]] = {
    "P1": {
        "title": "attention-only, d 256, 4 heads, 8 x 256 tokens, 16 x 16 grid",
        "block": {"kind": "attention", **_D256, "mlp": False},
        "inputs": _T256,
        "n": 16,
    },
    "P2": {
        "title": "BERT post-LN, d 256, 4 heads, 8 x 256 tokens, 12 x 12 grid",
        "block": {"kind": "post_ln", **_D256},
        "inputs": _T256,
        "n": 12,
    },
    "P3": {
        "title": "BERT post-LN at paper size (d 768, 12 heads, 16 x 512), 4 x 4 grid",
        "block": _BERT,
        "inputs": _PAPER_INPUTS,
        "n": 4,
    },
    "P4": {
        "title": "attention-only at paper size, 4 x 4 grid",
        "block": _ATTN,
        "inputs": _PAPER_INPUTS,
        "n": 4,
    },
    "P5": {
        "title": "attention-only, d 256, 8 x 256 tokens, 8 x 8 grid (small grid)",
        "block": {"kind": "attention", **_D256, "mlp": False},
        "inputs": _T256,
        "n": 8,
    },
}

PEER_QUICK = {
    "block": {"d_model": 32, "n_heads": 2},
    "inputs": {"batch": 2, "length": 16, "vocab": 300},
    "n": 2,
}


def peer_config(name: str, quick: bool = False) -> dict[str, Any]:
    """The sweep config of a PyTorch-peer workload: drift_norm 1e-2..1e5 x lambda 0.1..1e3 (log)."""
    w = PEERS[name]
    q = PEER_QUICK if quick else {}
    n = q.get("n", w["n"])
    return {
        "block": {**w["block"], **q.get("block", {})},
        "inputs": {**w["inputs"], **q.get("inputs", {})},
        "axes": [
            _log_axis("drift_norm", 1e-2, 1e5, n),
            {
                "name": "lambda",
                "knobs": ["q_scale", "k_scale"],
                "space": "log",
                "start": 0.1,
                "stop": 1e3,
                "num": n,
            },
        ],
        "sweep": {"seeds": 1, "metrics": PEER_METRICS},
    }


# --quick: the same structure at sizes that run in seconds (smoke run and tests). The
# paper-size stand-ins keep T > 64 so that the stable rank takes the Lanczos path.
QUICK: dict[str, dict[str, Any]] = {
    "W1": {
        "axes": [_log_axis("q_scale", 0.1, 10.0, 4), _log_axis("temperature", 0.1, 10.0, 4)],
        "sweep": {"seeds": 2, "micro_batch": 8},
    },
    "W2": {
        "block": {**_ATTN, "d_model": 96, "n_heads": 4},
        "inputs": {"kind": "embedding", "batch": 2, "length": 80, "vocab": 1000},
        "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}, _log_axis("q_scale", 0.5, 2.0, 2)],
        "loop_points": 2,
    },
    "W3": {
        "block": {**_BERT, "d_model": 96, "n_heads": 4},
        "inputs": {"kind": "embedding", "batch": 2, "length": 80, "vocab": 1000},
        "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}, _log_axis("q_scale", 0.5, 2.0, 2)],
        "loop_points": 2,
    },
    "W4": {"grids": {"1e2": (10, 10), "1e3": (40, 25)}},
}

# --stages: the same block with a metric subset left out, engine and loop per point
# (W2/W3 on STAGE_POINTS points), to see which stage limits the speed-up.
STAGES: dict[str, list[str] | None] = {
    "all metrics": None,
    "without stable_rank": [
        "input_cos",
        "input_cos_within",
        "attn_cos",
        "attn_cos_within",
        "out_cos",
        "out_cos_within",
        "attn_entropy",
        "attn_max",
        "q_mean_norm",
        "k_mean_norm",
        "qk_mean_cos",
    ],
    "attention only (entropy, max)": ["attn_entropy", "attn_max"],
}

STAGE_AXES = [{"name": "drift_norm", "values": [0.0, 0.5]}, _log_axis("q_scale", 0.25, 16.0, 4)]


# ----------------------------------------------------------------------------- workloads
def workload_configs(name: str, quick: bool = False) -> dict[str, dict]:
    """Sweep config tables of a workload: {"": config}, or {grid label: config} for W4."""
    w = WORKLOADS[name]
    q = QUICK[name] if quick else {}
    cfg = json.loads(json.dumps(w["config"]))
    for k in ("block", "inputs", "axes"):
        if k in q:
            cfg[k] = q[k]
    cfg["sweep"] = {**cfg["sweep"], **q.get("sweep", {})}
    if name != "W4":
        return {"": cfg}
    out = {}
    for label, (nq, nt) in q.get("grids", w["grids"]).items():
        out[label] = {
            **cfg,
            "axes": [_log_axis("q_scale", 0.1, 10.0, nq), _log_axis("temperature", 0.1, 10.0, nt)],
        }
    return out


# ----------------------------------------------------------------------------- M1: trained layer
# The counterfactual sharpness sweep on one trained layer (experiments/minilm_sharpness.py's
# protocol), simlab (simlab.studies.bench.counterfactual) against the HF hooks peer
# (simlab.studies.bench.hf_hooks). source: a model of simlab.checkpoints.models.MODELS or a
# checkpoint folder (relative: to the checkout); layer None: the last; lambdas: 0.01 .. 100,
# log-spaced, plus the uniform clamp; windows: window sets of batch x length token ids.
HOOKS: dict[str, dict[str, Any]] = {
    "M1": {
        "title": "counterfactual sweep on a trained layer",
        "source": "all-minilm-l6-v2",
        "layer": None,
        "batch": 8,
        "length": 128,
        "windows": 4,
        "lambdas": 9,
        "repeats": 2,
    },
    # M2: the decoder study's counterfactual sweep (experiments/smollm2_counterfactual.py:
    # simlab.studies.bench.decoder) against the HF hooks peer, a hooked whole-model forward per
    # point (simlab.studies.bench.hf_decoder). source: a GGUF model of MODELS or a .gguf file;
    # layers: the studied layers (the study's LAYERS); massive: the massive dims per layer
    # ("study": its calibration, figures/data/smollm2_counterfactual/meta.json); one window set
    # is one seed of the study (B = 2 windows of T = 256 tokens)
    "M2": {
        "title": "the decoder study's counterfactual sweep",
        "source": "smollm2-135m",
        "layers": [0, 1, 6, 11, 12, 20, 29],
        "massive": "study",
        "batch": 2,
        "length": 256,
        "windows": 1,
        "repeats": 2,
    },
}
# the hooks workloads on a decoder (simlab.studies.bench.trained_decoder runs them)
DECODERS = ("M2",)

# --quick: the tiny BERT fixture of the tests (2 layers, d 16, 2 heads)
HOOKS_QUICK = {
    "source": "tests/fixtures/checkpoints/bert",
    "batch": 2,
    "length": 16,
    "windows": 2,
    "lambdas": 3,
    "repeats": 1,
}


# M2 --quick: the tiny Llama GGUF fixture of the tests (tests/fixtures/make_gguf.py: 2 layers,
# d 64, 4 query / 2 key-value heads, causal, rotary); it has no massive activation, so dims are
# declared at both layers to run the intervention
DECODER_QUICK = {
    "source": "tests/fixtures/checkpoints/gguf/tied.gguf",
    "layers": [0, 1],
    "massive": {"0": [3, 7], "1": [3, 7]},
    "batch": 2,
    "length": 16,
    "windows": 1,
    "repeats": 1,
}


def hooks_config(name: str, quick: bool = False) -> dict[str, Any]:
    """The settings of a hooks workload (HOOKS), with HOOKS_QUICK's (M2: DECODER_QUICK's) sizes
    under --quick."""
    w = {k: v for k, v in HOOKS[name].items() if k != "title"}
    small = DECODER_QUICK if name in DECODERS else HOOKS_QUICK
    return {**w, **(small if quick else {})}


def hooks_title(name: str, cfg: dict[str, Any], layer: int) -> str:
    """The table's title of a hooks workload run with settings `cfg` on `layer`."""
    source = cfg["source"].rstrip("/").rsplit("/", 1)[-1]
    return (
        f"{HOOKS[name]['title']} ({source}, layer {layer}): {cfg['lambdas']} lambdas + uniform "
        f"clamp, {cfg['windows']} window sets of {cfg['batch']} x {cfg['length']} tokens"
    )
