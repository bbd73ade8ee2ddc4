"""The peer a researcher would otherwise use: a plain PyTorch eager per-point loop.

Written the way one writes it without simlab: per seed draw the weights (BERT init,
N(0, 0.02^2), biases 0, LayerNorm gain 1), the embedding table and the token ids once; then,
under `torch.inference_mode()`, one full forward of the block per grid point (drift N added to
every token, queries and keys scaled by lambda) and the metrics of simlab.core.metrics
computed the obvious way:

  cos      (|sum_i u_i|^2 - n) / (n (n - 1)) of the unit rows (global and per sequence);
  entropy  -sum_j w_ij log w_ij / log S, averaged over rows, heads and sequences;
  max      max_j w_ij averaged over rows.

It needs torch (the optional `bench` extra); simlab itself never imports it. `point` can also
be fed simlab's own weights and inputs (`from_simlab`), which makes it an independent oracle
for the engine (tests/test_bench.py).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

METRICS = (
    "input_cos",
    "input_cos_within",
    "attn_cos",
    "attn_cos_within",
    "out_cos",
    "out_cos_within",
    "attn_entropy",
    "attn_max",
)


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the optional extra
        raise RuntimeError("the PyTorch peer needs torch: pip install -e '.[bench]'") from e
    return torch


def draw(block: dict, inputs: dict, seed: int, device: str = "cpu") -> dict[str, Any]:
    """Weights, embedding table, token ids and drift direction with torch's generator."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    d = block["d_model"]
    f = block.get("d_ff") or d * block.get("mlp_ratio", 4)

    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    p = {n: normal(d, d) for n in ("wq", "wk", "wv", "wo")}
    p.update({n: torch.zeros(d) for n in ("bq", "bk", "bv", "bo", "ln1_b", "ln2_b")})
    p.update(ln1_g=torch.ones(d), ln2_g=torch.ones(d))
    if block.get("mlp", True):
        p.update(w1=normal(d, f), b1=torch.zeros(f), w2=normal(f, d), b2=torch.zeros(d))
    table = normal(inputs.get("vocab", 30522), d, std=inputs.get("embed_std", 0.02))
    ids = torch.randint(0, table.shape[0], (inputs["batch"], inputs["length"]), generator=g)
    u = torch.randn(d, generator=g)
    out = {"params": p, "x": table[ids], "u_b": u / u.norm()}
    return {
        k: ({n: t.to(device) for n, t in v.items()} if isinstance(v, dict) else v.to(device))
        for k, v in out.items()
    }


def from_simlab(state) -> dict[str, Any]:
    """The same dict from a simlab.core.lab.Lab seed state (layer 0 of a depth-1 block)."""
    torch = _torch()
    p0 = {k: np.asarray(v[0], np.float32) for k, v in state["params"].items()}
    d = p0["wq"].shape[0]
    p = {}
    for k, v in p0.items():
        if k in ("wq", "wk", "wv"):
            v = v.reshape(d, -1)
        elif k == "wo":
            v = v.reshape(-1, d)
        elif k in ("bq", "bk", "bv"):
            v = v.reshape(-1)
        p[k] = torch.from_numpy(np.array(v))
    return {
        "params": p,
        "x": torch.from_numpy(np.array(state["comps"]["x"], np.float32)),
        "u_b": torch.from_numpy(np.array(state["comps"]["u_b"], np.float32).reshape(-1)),
    }


def _cos(x):
    """(global, mean within-sequence) mean pairwise cosine of rows of x (B, T, D)."""
    u = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    b, t, _ = x.shape
    n = b * t
    s = u.reshape(n, -1).sum(0)
    glob = (s @ s - (u * u).sum()) / (n * (n - 1))
    sw = u.sum(1)
    within = ((sw * sw).sum(-1) - (u * u).sum((1, 2))) / (t * (t - 1))
    return glob.item(), within.mean().item()


def point(
    drawn: dict, kind: str, n_heads: int, drift: float, lam: float, ln_eps: float = 1e-12
) -> dict[str, float]:
    """One grid point: the block's forward at drift N and q/k scale lambda, and the metrics."""
    torch = _torch()
    F = torch.nn.functional
    p, x = drawn["params"], drawn["x"] + drift * drawn["u_b"]
    b, t, d = x.shape
    k_ = d // n_heads

    def heads(z):
        return z.view(b, t, n_heads, k_).transpose(1, 2)

    q = heads(x @ p["wq"] + p["bq"]) * lam
    k = heads(x @ p["wk"] + p["bk"]) * lam
    v = heads(x @ p["wv"] + p["bv"])
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(k_), dim=-1)
    ent = -(w * torch.log(w.clamp_min(1e-38))).sum(-1).mean() / math.log(t)
    wmax = w.amax(-1).mean()
    attn = (w @ v).transpose(1, 2).reshape(b, t, d) @ p["wo"] + p["bo"]
    if kind == "post_ln":
        h = F.layer_norm(x + attn, (d,), p["ln1_g"], p["ln1_b"], ln_eps)
        y = (
            F.layer_norm(
                h + F.gelu(h @ p["w1"] + p["b1"], approximate="tanh") @ p["w2"] + p["b2"],
                (d,),
                p["ln2_g"],
                p["ln2_b"],
                ln_eps,
            )
            if "w1" in p
            else h
        )
    else:  # attention-only block with the residual
        y = x + attn
    out = {}
    for tag, arr in (("input", x), ("attn", attn), ("out", y)):
        out[f"{tag}_cos"], out[f"{tag}_cos_within"] = _cos(arr)
    out["attn_entropy"], out["attn_max"] = ent.item(), wmax.item()
    return out


def loop(
    block: dict,
    inputs: dict,
    drift: list[float],
    lam: list[float],
    seeds: int = 1,
    points: int | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Time the per-point loop over the drift x lambda grid (C order), `seeds` seeds; with
    `points`, only an evenly spaced subset of that many points per seed is timed (the total is
    extrapolated). Returns the wall time split into drawing and points, and the last metrics."""
    torch = _torch()
    grid = [(n, lm) for n in drift for lm in lam]
    idx = (
        range(len(grid))
        if not points or points >= len(grid)
        else np.unique(np.linspace(0, len(grid) - 1, points).round().astype(int))
    )
    idx = list(idx)
    t_draw = t_points = 0.0
    last = None
    with torch.inference_mode():
        for s in range(seeds):
            t0 = time.perf_counter()
            drawn = draw(block, inputs, s, device)
            t1 = time.perf_counter()
            for i in idx:
                last = point(drawn, block["kind"], block["n_heads"], *grid[i])
            t_draw += t1 - t0
            t_points += time.perf_counter() - t1
    scale = len(grid) / len(idx)
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": device,
        "n_points": len(grid),
        "seeds": seeds,
        "timed_points": len(idx),
        "draw_s": t_draw,
        "points_s": t_points,
        "total_s": t_draw + t_points * scale,
        "extrapolated": scale != 1,
        "ms_per_point": 1e3 * t_points / (len(idx) * seeds),
        "last": last,
    }
