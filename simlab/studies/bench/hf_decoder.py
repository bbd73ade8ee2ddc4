"""M2, the peer: the decoder study's counterfactual sweep (experiments/smollm2_counterfactual.py)
written the way a TransformerLens / nnsight user writes it (docs/performance.md, "M2: the
decoder study's counterfactual sweep"): HuggingFace transformers' own GGUF load of the model
(`from_pretrained(folder, gguf_file=...)`, float32, eager attention, inference_mode), and per
point one whole-model forward with forward hooks doing the intervention on the studied layer L:

  lambda        the outputs of L's q_proj and k_proj times lambda (q_scale = k_scale; rotary is
                linear, so scaling before it is scaling after it);
  uniform       L's attention probabilities replaced by the causal uniform clamp
                w_ij = 1 / (i + 1) for j <= i, the context recomputed as o_proj(w V) from the
                v_proj output (TransformerLens' hook_pattern);
  sink          key 0 removed from every head's probabilities and each row renormalised over
                the rest, w_ij / sum_{j' >= 1} w_ij' (j >= 1), w_i0 = 0; row 0, whose only key
                is 0, keeps it; the context recomputed as above;
  massive       a pre-hook on L: its input's position 0, in the massive dims, set per sequence
                to the mean of the other positions (simlab.studies.massive.remove).
Read by hooks: L's output and the last layer's output (before the final norm; the forward stops
there), and L's attention probabilities. "trained" (no intervention) is one plain forward per
window set, read at every studied layer. Measures, in torch float32 as simlab.core.metrics
defines them: the global, within- and between-sequence mean pairwise cosine, the cosine
without position 0, position 0's norm over the median of the others', the participation ratio
(tr C)^2 / ||C||_F^2 of the centred covariance with and without position 0; per head the mean
w_i0 (sink mass) and the mean over rows i >= 1 of H(w_i) / ln(i + 1).
Needs torch, transformers and gguf (the `bench` and `models` extras); simlab never imports them.
Fed the same ids it is an independent oracle for simlab's side (tests/studies/test_bench_m2.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from simlab.studies.bench.hf_hooks import _torch

CONDITIONS = ("trained", "uniform", "sink", "lambda 0.5", "lambda 2", "massive removed")
LAMBDAS = {"lambda 0.5": 0.5, "lambda 2": 2.0}
READS = ("layer", "last")
MEASURES = (
    "cos",
    "cos_within",
    "cos_between",
    "cos_rest",
    "pos0_norm_ratio",
    "participation_ratio",
    "participation_ratio_rest",
)


def load_model(path, dtype: str = "float32"):
    """The GGUF file as HF's LlamaModel (the decoder stack, no LM head), eager attention."""
    torch, transformers = _torch()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    path = Path(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=getattr(torch, dtype), attn_implementation="eager"
    )
    return model.model.eval()


class _Stop(Exception):
    """Raised by the last layer's hook: the forward ends before the final norm."""


def _unit(x):
    n = x.norm(dim=-1, keepdim=True)
    return x / n.clamp_min(1e-30) * (n > 0)


def _cos_parts(x):
    """(global, pooled within, between) mean pairwise cosine of x (B, T, D)."""
    b, t, _ = x.shape
    u = _unit(x)
    s = u.sum(1)
    q = (u * u).sum()
    tot = s.sum(0)
    own = (s * s).sum()
    n = b * t
    glob = ((tot * tot).sum() - q) / (n * (n - 1))
    within = (own - q) / (b * t * (t - 1))
    between = ((tot * tot).sum() - own) / (b * (b - 1) * t * t) if b > 1 else float("nan")
    return glob, within, between


def _pr(x):
    """(tr C)^2 / ||C||_F^2 of the population covariance of the rows of x (N, D)."""
    c = x - x.mean(0)
    cov = c.T @ c / x.shape[0]
    return (cov.trace() ** 2 / (cov * cov).sum()).item()


def measures(x) -> list[float]:
    """The study's measures of one hidden state (B, T, D) (the module docstring)."""
    torch, _ = _torch()
    glob, within, between = _cos_parts(x)
    rest = _cos_parts(x[:, 1:])[0]
    norms = x.norm(dim=-1)
    med = torch.quantile(norms[:, 1:], 0.5, dim=-1)  # the mean of the two middle ones
    ratio = (norms[:, 0] / med).mean()
    d = x.shape[-1]
    return [
        float(glob),
        float(within),
        float(between),
        float(rest),
        ratio.item(),
        _pr(x.reshape(-1, d)),
        _pr(x[:, 1:].reshape(-1, d)),
    ]


def head_stats(w) -> np.ndarray:
    """(2, H): per head the mean w_i0 over all rows, and the mean over rows i >= 1 of
    H(w_i) / ln(i + 1) (causal: row i has i + 1 keys)."""
    torch, _ = _torch()
    t = w.shape[-1]
    sink = w[..., 0].mean((0, 2))
    ent = -(w * torch.log(w.clamp_min(torch.finfo(w.dtype).tiny))).sum(-1)  # (B, H, T)
    norm = torch.log(torch.arange(1, t + 1, dtype=w.dtype))
    ent = (ent[..., 1:] / norm[1:]).mean((0, 2))
    return np.stack([sink.numpy(), ent.numpy()])


class DecoderHooks:
    """Forward hooks on the studied layers of a LlamaModel (the module docstring). Set `point`
    = (layer, condition) or None (trained) and `dims` between forwards; `seen` holds the reads
    of the last forward: ("y", L), ("w", L) and "last"."""

    def __init__(self, model, layers, dims):
        self.model, self.dims = model, dims
        self.point: tuple[int, str] | None = None
        self.seen: dict = {}
        self.handles = []
        for layer in layers:
            lay = model.layers[layer]
            att = lay.self_attn
            self.handles += [
                att.q_proj.register_forward_hook(self._scale(layer)),
                att.k_proj.register_forward_hook(self._scale(layer)),
                att.v_proj.register_forward_hook(self._value(layer)),
                att.register_forward_hook(self._pattern(layer)),
                lay.register_forward_pre_hook(self._massive(layer)),
                lay.register_forward_hook(self._output(layer)),
            ]
        self.handles.append(model.layers[-1].register_forward_hook(self._last))

    def _on(self, layer: int, *conditions: str) -> bool:
        return self.point is not None and self.point[0] == layer and self.point[1] in conditions

    def _scale(self, layer):
        def hook(module, args, out):
            if self._on(layer, *LAMBDAS):
                return out * LAMBDAS[self.point[1]]
            return None

        return hook

    def _value(self, layer):
        def hook(module, args, out):
            if self._on(layer, "uniform", "sink"):
                self.seen["v"] = out

        return hook

    def _pattern(self, layer):
        def hook(module, args, out):
            w = out[1]
            if self._on(layer, "uniform", "sink"):
                torch, _ = _torch()
                t = w.shape[-1]
                if self.point[1] == "uniform":
                    causal = torch.ones(t, t, dtype=w.dtype).tril()
                    w = (causal / causal.sum(-1, keepdim=True)).expand_as(w)
                else:
                    rest = w[..., 1:]
                    w = torch.cat([torch.zeros_like(w[..., :1]), rest / rest.sum(-1, True)], -1)
                    w[..., 0, :] = 0.0
                    w[..., 0, 0] = 1.0  # row 0 keeps its only key
                v = self.seen.pop("v")
                b, _, _ = v.shape
                v = v.view(b, t, -1, module.head_dim).transpose(1, 2)  # (B, KV, T, dh)
                v = v.repeat_interleave(module.num_key_value_groups, dim=1)
                ctx = (w @ v).transpose(1, 2).reshape(b, t, -1)
                out = (module.o_proj(ctx), w, *out[2:])
            if self.point is None or self.point[0] == layer:
                self.seen["w", layer] = w
            return out

        return hook

    def _massive(self, layer):
        def hook(module, args):
            if self._on(layer, "massive removed"):
                x = args[0].clone()
                dims = list(self.dims[layer])
                x[:, 0, dims] = x[:, 1:, dims].mean(1)
                return (x, *args[1:])
            return None

        return hook

    def _output(self, layer):
        def hook(module, args, out):
            self.seen["y", layer] = out[0] if isinstance(out, tuple) else out

        return hook

    def _last(self, module, args, out):
        self.seen["last"] = out[0] if isinstance(out, tuple) else out
        raise _Stop

    def forward(self, ids) -> None:
        """The model's forward on ids, ended after the last layer."""
        self.seen = {}
        try:
            self.model(input_ids=ids, use_cache=False)
        except _Stop:
            pass

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def sweep(model, layers, dims, windows) -> tuple[np.ndarray, np.ndarray]:
    """(values (windows, layers, conditions, reads, measures), heads (windows, layers,
    conditions, 2, heads)) on each window set of token ids (numpy (B, T)): one plain forward
    (trained, read at every layer), then one hooked forward per layer and condition; NaN where
    a layer has no massive dims."""
    torch, _ = _torch()
    layers = tuple(sorted(layers))
    hooks = DecoderHooks(model, layers, dims)
    n_heads = model.config.num_attention_heads
    vals = np.full((len(windows), len(layers), len(CONDITIONS), len(READS), len(MEASURES)), np.nan)
    heads = np.full((len(windows), len(layers), len(CONDITIONS), 2, n_heads), np.nan)
    try:
        with torch.inference_mode():
            for i, ids in enumerate(windows):
                ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
                hooks.point = None
                hooks.forward(ids)
                last = measures(hooks.seen["last"])
                for li, layer in enumerate(layers):
                    vals[i, li, 0] = [measures(hooks.seen["y", layer]), last]
                    heads[i, li, 0] = head_stats(hooks.seen["w", layer])
                for li, layer in enumerate(layers):
                    for c, cond in enumerate(CONDITIONS[1:], 1):
                        if cond == "massive removed" and dims.get(layer) is None:
                            continue
                        hooks.point = (layer, cond)
                        hooks.forward(ids)
                        vals[i, li, c] = [
                            measures(hooks.seen["y", layer]),
                            measures(hooks.seen["last"]),
                        ]
                        heads[i, li, c] = head_stats(hooks.seen["w", layer])
    finally:
        hooks.point = None
        hooks.remove()
    return vals, heads


def n_forwards(layers, dims) -> int:
    """The forwards `sweep` runs per window set: one plain, one per layer and condition."""
    per = [len(CONDITIONS) - 1 - (dims.get(layer) is None) for layer in layers]
    return 1 + sum(per)


def run(path, layers, dims, windows, repeats: int = 2, threads=None, count_flops=True) -> dict:
    """Time the peer on `windows` (a list of ids, or a function of the vocabulary size giving
    it): load (HF's GGUF load), one untimed pass over the first window set under
    torch's FLOP counter (torch.utils.flop_counter.FlopCounterMode: the matmul FLOPs of one
    window set; its first-call allocations; without count_flops one plain forward), then
    `repeats` passes over every window set, the best one the steady state. Returns the
    seconds, the FLOPs (None without count_flops) and the values of the last pass."""
    torch, transformers = _torch()
    from torch.utils.flop_counter import FlopCounterMode

    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = load_model(path)
    load_s = time.perf_counter() - t0
    if callable(windows):  # drawn from the model's vocabulary
        windows = windows(model.config.vocab_size)
    counter = None
    if count_flops:
        with FlopCounterMode(display=False) as counter:
            sweep(model, layers, dims, windows[:1])
    else:  # one plain forward: torch's first-call allocations
        with torch.inference_mode():
            model(input_ids=torch.as_tensor(np.asarray(windows[0]), dtype=torch.long))
    passes = []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        vals, heads = sweep(model, layers, dims, windows)
        passes.append(time.perf_counter() - t)
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "load_s": load_s,
        "n_windows": len(windows),
        "forwards_per_window": n_forwards(layers, dims),
        "passes": passes,
        "steady_s": min(passes),
        "flops_per_window": None if counter is None else int(counter.get_total_flops()),
        "values": vals.tolist(),
        "heads": heads.tolist(),
    }
