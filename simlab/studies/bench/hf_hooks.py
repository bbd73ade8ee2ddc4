"""M1, the peer: the counterfactual sharpness sweep on one layer of a trained BERT written the way
a TransformerLens / nnsight user writes it (docs/performance.md, "M1: a counterfactual sweep on a
trained layer"): HuggingFace transformers' BertModel in torch (eager attention, inference_mode,
the checkpoint's dtype float32 unless asked), forward hooks on layer L, a Python loop over the
window sets and lambda, the metrics computed in torch.

Hooks on layer L (`LayerHooks`):
  query, key Linear   their outputs times lambda (q_i -> lambda q_i, k_j -> lambda k_j, bias
                      included: simlab's q_scale = k_scale = lambda);
  value Linear        its output kept (the uniform clamp reads it);
  self-attention      its probabilities read (eager attention returns them), or replaced by the
                      uniform clamp w_ij = 1 / S, the context recomputed as w V (TransformerLens'
                      hook_pattern);
  the layer           its input (pre-hook) and output kept; the forward stops there (raising,
                      as nnsight's .stop() and TransformerLens' stop_at_layer do).
Metrics of one point, as simlab.core.metrics defines them: out_cos_gain = cos(y) - cos(x), cos
the mean pairwise cosine of the B T token vectors, (|sum_i u_i|^2 - n) / (n (n - 1)); and
attn_entropy = mean over rows and heads of -sum_j w_ij ln w_ij / ln S.

Two ways to run the points (`sweep(mode=...)`):
  "layer"  per window set one forward up to layer L's input, then per point layer L alone on it
           (the lower layers once per window set, as simlab's seed state; run_with_cache then
           start_at_layer in TransformerLens);
  "model"  per point the whole forward up to layer L's output (run_with_hooks with
           stop_at_layer; the lower layers again at every point).
It needs torch and transformers (the optional `bench` extra); simlab itself never imports them.
Fed the same ids it is an independent oracle for simlab's side (tests/studies/test_bench_hooks.py).
"""

from __future__ import annotations

import math
import time

import numpy as np

from simlab.studies.bench.torch_loop import _cos

MODES = ("layer", "model")


def _torch():
    try:
        import torch  # deferred: an optional dependency (the bench extra)
        import transformers  # deferred: an optional dependency (the bench extra)
    except ImportError as e:  # pragma: no cover - the optional extra
        raise RuntimeError(
            "the HF hooks peer needs torch and transformers: pip install -e '.[bench]'"
        ) from e
    return torch, transformers


def load_model(folder, dtype: str = "float32"):
    """The checkpoint as HF BertModel (eager attention, eval mode) in `dtype`."""
    torch, transformers = _torch()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager")
    return model.to(getattr(torch, dtype)).eval()


class _Stop(Exception):
    """Raised by a hook to end the forward at layer L (nnsight's early stop)."""


class LayerHooks:
    """Forward hooks on layer `layer` of a BertModel (see the module docstring). Set `lam`
    (None: no scaling), `uniform` (the clamp) and `stop` ("before" the layer, "after" it, or
    None) between forwards; `seen` holds x, y, w of the last forward."""

    def __init__(self, model, layer: int):
        self.block = model.encoder.layer[layer]
        att = self.block.attention.self
        self.lam, self.uniform, self.stop = None, False, None
        self.seen: dict = {}
        self.handles = [
            att.query.register_forward_hook(self._scale),
            att.key.register_forward_hook(self._scale),
            att.value.register_forward_hook(self._value),
            att.register_forward_hook(self._pattern),
            self.block.register_forward_pre_hook(self._input),
            self.block.register_forward_hook(self._output),
        ]

    def _scale(self, module, args, out):
        return None if self.lam is None else out * self.lam

    def _value(self, module, args, out):
        self.seen["v"] = out

    def _pattern(self, module, args, out):
        ctx, w = out[0], out[1]
        if self.uniform:
            torch, _ = _torch()
            v = self.seen["v"]
            b, s, d = v.shape
            h = module.num_attention_heads
            v_BHSK = v.view(b, s, h, d // h).transpose(1, 2)
            w = torch.full((b, h, ctx.shape[1], s), 1.0 / s, dtype=v.dtype, device=v.device)
            ctx = (w @ v_BHSK).transpose(1, 2).reshape(b, -1, d)
            out = (ctx, w, *out[2:])
        self.seen["w"] = w
        return out

    def _input(self, module, args):
        self.seen["x"] = args[0]
        if self.stop == "before":
            raise _Stop

    def _output(self, module, args, out):
        self.seen["y"] = out[0] if isinstance(out, tuple) else out
        if self.stop == "after":
            raise _Stop

    def forward(self, model, ids, stop: str) -> None:
        """The model's forward on ids, ended by the hooks at layer L (`stop`)."""
        self.stop = stop
        try:
            model(input_ids=ids)
        except _Stop:
            pass
        finally:
            self.stop = None

    def metrics(self) -> tuple[float, float]:
        """(out_cos_gain, attn_entropy) of the last forward."""
        torch, _ = _torch()
        w = self.seen["w"]
        ent = -(w * torch.log(w.clamp_min(torch.finfo(w.dtype).tiny))).sum(-1).mean()
        gain = _cos(self.seen["y"])[0] - _cos(self.seen["x"])[0]
        return gain, ent.item() / math.log(w.shape[-1])

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def sweep(model, layer: int, windows, lams, mode: str = "layer") -> np.ndarray:
    """(windows, len(lams) + 1, 2) metrics (out_cos_gain, attn_entropy) of layer `layer` over
    lambda and, last, the uniform clamp, on each window set of token ids (numpy (B, T))."""
    torch, _ = _torch()
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {MODES}")
    hooks = LayerHooks(model, layer)
    out = np.zeros((len(windows), len(lams) + 1, 2))
    try:
        with torch.inference_mode():
            for i, ids in enumerate(windows):
                ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
                if mode == "layer":
                    hooks.forward(model, ids, "before")
                    x = hooks.seen["x"]
                for j, (lam, uniform) in enumerate([(lam, False) for lam in lams] + [(None, True)]):
                    hooks.lam, hooks.uniform = (None if uniform else float(lam)), uniform
                    if mode == "layer":
                        hooks.block(x)
                    else:
                        hooks.forward(model, ids, "after")
                    out[i, j] = hooks.metrics()
    finally:
        hooks.remove()
    return out


def flops(model, layer: int, ids, lams, mode: str = "layer") -> int:
    """The matmul FLOPs (2 m n k each: addmm, bmm, ...) of `sweep` on one window set, as
    torch's own counter (torch.utils.flop_counter.FlopCounterMode) counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        sweep(model, layer, [ids], lams, mode)
    return int(counter.get_total_flops())


def run(folder, layer: int, windows, lams, modes=MODES, repeats: int = 2, threads=None) -> dict:
    """Time the peer: load (from_pretrained), one untimed pass over the first window set (torch's
    first-call allocations), then per mode `repeats` passes over every window set, the best one
    the steady state. Returns the seconds, the values and one window set's FLOPs (`flops`,
    counted after the timed passes), per mode."""
    torch, transformers = _torch()
    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = load_model(folder)
    load_s = time.perf_counter() - t0
    sweep(model, layer, windows[:1], lams[:1], modes[0])
    out = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "load_s": load_s,
        "n_windows": len(windows),
        "modes": {},
    }
    for mode in modes:
        passes = []
        for _ in range(max(1, repeats)):
            t = time.perf_counter()
            vals = sweep(model, layer, windows, lams, mode)
            passes.append(time.perf_counter() - t)
        out["modes"][mode] = {
            "passes": passes,
            "steady_s": min(passes),
            "values": vals.tolist(),
            "flops_per_window": flops(model, layer, windows[0], lams, mode),
        }
    return out
