"""Shared test helpers: the independent numpy (float64) oracles of the physics, and a tiny toy
model with the simlab.core.lab.Lab protocol. (pyproject.toml puts tests/ on the path:
`from conftest import np_layer`.)

The test process has CPU_DEVICES forced CPU devices (set here, before jax starts its backend,
as equinox does), so multi-device sweeps run in-process (`run_sweep(..., devices=N)`); a sweep
uses one device unless a test asks for more ($SIMLAB_DEVICES=1, inherited by subprocesses).
Float64 checks run in-process under `jax.enable_x64(True)`."""

from __future__ import annotations

import math
import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

CPU_DEVICES = 4
jax.config.update("jax_num_cpu_devices", CPU_DEVICES)
os.environ.setdefault("SIMLAB_DEVICES", "1")


def _cos(x_BTD):
    """Mean pairwise cosine of all B*T vectors: (|sum u|^2 - n) / (n (n - 1))."""
    u = x_BTD.reshape(-1, x_BTD.shape[-1])
    u = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    n = u.shape[0]
    return (jnp.sum(jnp.sum(u, 0) ** 2) - n) / (n * (n - 1))


class ToyLab:
    """One random attention head on gaussian tokens plus a drift: metrics "entropy" () and
    "cos" (2,) = (input cosine, output cosine), the latter standing in for a layer axis."""

    metric_names = ("entropy", "cos")

    def __init__(self, d: int = 8, batch: int = 2, length: int = 6):
        self.d, self.batch, self.length = d, batch, length

    def seed_state(self, key):
        kx, kq, kk, ku = jax.random.split(key, 4)
        d = self.d
        u = jax.random.normal(ku, (d,))
        return {
            "x": jax.random.normal(kx, (self.batch, self.length, d)),
            "wq": jax.random.normal(kq, (d, d)) / jnp.sqrt(d),
            "wk": jax.random.normal(kk, (d, d)) / jnp.sqrt(d),
            "u": u / jnp.linalg.norm(u),
        }

    def point(self, state, knobs):
        x = state["x"] + knobs["drift_norm"] * state["u"]
        q = knobs["q_scale"] * x @ state["wq"]
        k = knobs["k_scale"] * x @ state["wk"]
        logits = jnp.einsum("btd,bsd->bts", q, k) / (jnp.sqrt(self.d) * knobs["temperature"])
        p = jax.nn.softmax(logits, axis=-1)
        entropy = -jnp.sum(p * jnp.log(p + 1e-30), axis=-1).mean()
        y = knobs["attn_residual"] * x + jnp.einsum("bts,bsd->btd", p, x)
        return {"entropy": entropy, "cos": jnp.stack([_cos(x), _cos(y)])}

    def metric_dims(self):
        """The names of each metric's dimensions at one point (LabProtocol, optional)."""
        return {"entropy": [], "cos": ["layer"]}


# the covariates a post-LN sweep with its MLP records per seed (simlab.core.lab), as
# the tests that grow or reproduce such a sweep expect them
POST_LN_COVARIATES = frozenset(
    {
        "drift_vo",
        "drift_vo_dot",
        "vo_iso",
        "drift_q",
        "mlp_shared",
        "mlp_drift_dot",
        "mlp_trace",
        "vo_trace",
    }
)


# One persistent compilation cache for every compiled program of the tests (every xdist worker
# and every subprocess inherits it), kept between runs: most of the suite's time is XLA
# compiling small programs, and a program that did not change is loaded instead (the very same
# executable, so the numbers are unchanged; jax keys an entry by the program, the compile
# options, the flags and the jax version). SIMLAB_TEST_CACHE: the directory (default
# $XDG_CACHE_HOME/simlab/test-jax, else ~/.cache/simlab/test-jax), or "off" for a fresh one per
# run, removed at its end (every program compiled anew, as on a fresh machine). Not capped
# (jax's eviction, jax_compilation_cache_max_size, removed entries that other workers were
# reading): a full run fills ~42 MB; `rm -r` the directory to empty it. Tests of the cache
# itself set their own.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
_KEEP = os.environ.get("SIMLAB_TEST_CACHE", "").strip()
if _KEEP.lower() in ("off", "0", "no", "false"):
    _KEEP = ""
    CACHE_DIR = os.path.join(tempfile.gettempdir(), f"simlab-test-cache-{os.getuid()}", _RUN)
else:
    _base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    CACHE_DIR = _KEEP = os.path.expanduser(_KEEP) or os.path.join(_base, "simlab", "test-jax")
os.environ.setdefault("SIMLAB_COMPILE_CACHE", CACHE_DIR)

from simlab.engine import compile_cache  # noqa: E402

compile_cache.enable()  # every jit of the tests, not only the sweeps' (which enable it too)

# the trained input kinds registered in every worker, so that parametrizations over INPUTS agree
import simlab.checkpoints  # noqa: E402, F401


def pytest_sessionfinish(session, exitstatus):
    """A per-run cache (SIMLAB_TEST_CACHE=off) goes when the run ends (in the controller, or a
    plain run)."""
    if not hasattr(session.config, "workerinput") and not _KEEP:
        shutil.rmtree(os.environ.get("SIMLAB_COMPILE_CACHE", CACHE_DIR), ignore_errors=True)


# ----------------------------------------------------------------------------- docs from scripts
def experiment_script(name: str):
    """experiments/<name>.py imported as a module (the scripts that print docs' numbers)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def doc_block(text: str, name: str) -> str:
    """The lines between `<!-- name:begin ... -->` and `<!-- name:end -->` of a doc."""
    begin, end = f"<!-- {name}:begin", f"<!-- {name}:end -->"
    i = text.index(begin)
    return text[text.index("\n", i) + 1 : text.index(end)]


# ----------------------------------------------------------------------------- numpy oracles
# ----------------------------------------------------------------------------- oracles
def np_pairwise_cos(x_ND) -> float:
    """Mean cosine over the n (n - 1) ordered distinct pairs; a zero row has cosine 0 with
    everything and still counts in the pairs (documented convention)."""
    x = np.asarray(x_ND, np.float64)
    n = x.shape[0]
    norms = np.array([math.sqrt(sum(float(v) ** 2 for v in row)) for row in x])
    cos = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j and norms[i] > 0 and norms[j] > 0:
                cos[i, j] = float(x[i] @ x[j]) / (norms[i] * norms[j])
    return float(cos.sum() / (n * (n - 1)))


def np_anisotropy(x_BTD):
    x = np.asarray(x_BTD, np.float64)
    b, t, d = x.shape
    return np_pairwise_cos(x.reshape(b * t, d)), float(np.mean([np_pairwise_cos(s) for s in x]))


def np_anisotropy_centred(x_BTD):
    """(global, within) mean pairwise cosine of the mean-centred tokens in float64, from the
    definition: x_i - xbar (xbar over all B*T tokens; per sequence for within), then every
    pair's cosine (np_pairwise_cos)."""
    x = np.asarray(x_BTD, np.float64)
    b, t, d = x.shape
    flat = x.reshape(b * t, d)
    glob = np_pairwise_cos(flat - flat.mean(axis=0))
    return glob, float(np.mean([np_pairwise_cos(s - s.mean(axis=0)) for s in x]))


def np_attn_entropy(w_BHTS, causal: bool) -> float:
    w = np.asarray(w_BHTS, np.float64)
    b, h, t, s = w.shape
    vals = []
    for bi in range(b):
        for hi in range(h):
            for i in range(t):
                n = min(i + 1, s) if causal else s
                if n <= 1:
                    continue  # a single attended key: excluded
                ent = -sum(p * math.log(p) for p in w[bi, hi, i] if p > 0)  # 0 log 0 = 0
                vals.append(ent / math.log(n))
    return float(np.mean(vals))


def np_attn_max(w_BHTS) -> float:
    w = np.asarray(w_BHTS, np.float64)
    return float(np.mean([row.max() for row in w.reshape(-1, w.shape[-1])]))


def np_stable_rank(y_BTD) -> float:
    out = []
    for y in np.asarray(y_BTD, np.float64):
        s = np.linalg.svd(y, compute_uv=False)
        out.append(0.0 if s[0] == 0 else float(np.sum(s**2) / s[0] ** 2))
    return float(np.mean(out))


def np_qk_drift(q_BTHK, k_BSHK):
    q, k = np.asarray(q_BTHK, np.float64), np.asarray(k_BSHK, np.float64)
    nq, nk, cs = [], [], []
    for h in range(q.shape[2]):
        mq = q[:, :, h, :].reshape(-1, q.shape[-1]).mean(0)
        mk = k[:, :, h, :].reshape(-1, k.shape[-1]).mean(0)
        a, b = np.linalg.norm(mq), np.linalg.norm(mk)
        nq.append(a)
        nk.append(b)
        cs.append(0.0 if a == 0 or b == 0 else float(mq @ mk) / (a * b))
    return float(np.mean(nq)), float(np.mean(nk)), float(np.mean(cs))


# ----------------------------------------------------------------------------- numpy oracle
def np_token_cos(a_BTD, x_BTD) -> float:
    """mean over tokens of cos(a_i, x_i) in float64 (0 where either is zero)."""
    a, x = (np.asarray(t, np.float64).reshape(-1, np.shape(t)[-1]) for t in (a_BTD, x_BTD))
    c = [
        float(ai @ xi) / (np.linalg.norm(ai) * np.linalg.norm(xi))
        if np.any(ai) and np.any(xi)
        else 0.0
        for ai, xi in zip(a, x)
    ]
    return float(np.mean(c))


def np_residual_ratio(a_BTD, x_BTD) -> float:
    """mean over tokens of |a_i| / |x_i| in float64 (0 where x_i = 0)."""
    a, x = (np.asarray(t, np.float64).reshape(-1, np.shape(t)[-1]) for t in (a_BTD, x_BTD))
    r = [np.linalg.norm(ai) / np.linalg.norm(xi) if np.any(xi) else 0.0 for ai, xi in zip(a, x)]
    return float(np.mean(r))


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def np_layernorm(x, g=None, b=None, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y if g is None else y * g + b


def np_pattern_weights(pattern, beta, t_len, causal):
    """(T, S) weights of a clamped pattern, from the definition (simlab.core.patterns): row i
    attends n = i + 1 (causal) or T keys; e^beta / (e^beta + n - 1) on its target (i for
    "token", 0 for "shared"), 1 / (e^beta + n - 1) on each other key; "uniform" 1/n each."""
    w = np.zeros((t_len, t_len))
    for i in range(t_len):
        n = i + 1 if causal else t_len
        b = 0.0 if pattern == "uniform" else float(beta)
        target = i if pattern == "token" else 0
        for j in range(n):
            w[i, j] = (math.exp(b) if j == target else 1.0) / (math.exp(b) + n - 1)
    return w


def np_layer(spec, p, x, kn, u_q, u_k, with_mlp=False):
    """One block in float64 numpy, written from the math in simlab.core.block's docstring:
    the attention weights are the softmax or the clamp of spec.pattern, the branches carry the
    gains attn_gain and mlp_gain. Returns (y, attn, w, q, k), and the MLP branch's output
    (before its gain; None without MLP) after them with_mlp."""
    p = {n: np.asarray(v, np.float64) for n, v in p.items()}
    x = np.asarray(x, np.float64)
    kn = {n: float(v) for n, v in kn.items()}
    ln1_x = np_layernorm(x, p["ln1_g"], p["ln1_b"], spec.ln_eps)
    a_in = ln1_x if spec.kind in ("pre_ln", "parallel") else x
    q = np.einsum("btd,dhk->bthk", a_in, p["wq"]) + p["bq"]
    k = np.einsum("btd,dhk->bthk", a_in, p["wk"]) + p["bk"]
    v = np.einsum("btd,dhk->bthk", a_in, p["wv"]) + p["bv"]
    if spec.qk_norm == "layernorm":
        q, k = (kn["qk_norm_gain"] * np_layernorm(t, None, None, 1e-6) for t in (q, k))
    elif spec.qk_norm == "rmsnorm":
        q, k = (
            kn["qk_norm_gain"] * t / np.sqrt((t**2).mean(-1, keepdims=True) + 1e-6) for t in (q, k)
        )
    q = kn["q_scale"] * q + kn["q_shift"] * np.asarray(u_q, np.float64)
    k = kn["k_scale"] * k + kn["k_shift"] * np.asarray(u_k, np.float64)
    t_len = x.shape[1]
    w = np.zeros((x.shape[0], q.shape[2], t_len, t_len))
    pattern = getattr(spec, "pattern", "softmax")
    for b in range(x.shape[0]):
        for h in range(q.shape[2]):
            if pattern != "softmax":
                w[b, h] = np_pattern_weights(pattern, kn["pattern_beta"], t_len, spec.causal)
                continue
            for i in range(t_len):
                n = i + 1 if spec.causal else t_len
                logits = np.array([q[b, i, h] @ k[b, j, h] for j in range(n)])
                logits /= math.sqrt(q.shape[-1]) * kn["temperature"]
                e = np.exp(logits - logits.max())
                w[b, h, i, :n] = e / e.sum()
    o = np.einsum("bhts,bshk->bthk", w, v)
    attn = np.einsum("bthk,hkd->btd", o, p["wo"]) + p["bo"]
    acts = {
        "gelu": np_gelu_tanh,
        "relu": lambda z: np.maximum(z, 0.0),
        "linear": lambda z: z,
        "silu": lambda z: z / (1.0 + np.exp(-z)),
    }
    out = {}

    def mlp(h):
        g = acts[spec.activation](h @ p["w1"] + p["b1"])
        if spec.mlp_center:  # the ablation: each token's hidden activation centred over units
            g = g - g.mean(axis=-1, keepdims=True)
        out["mlp"] = g @ p["w2"] + p["b2"]
        return kn["mlp_gain"] * out["mlp"]

    a, m, ga = kn["attn_residual"], kn["mlp_residual"], kn["attn_gain"]
    if spec.kind == "post_ln":
        h = np_layernorm(a * x + ga * attn, p["ln1_g"], p["ln1_b"], spec.ln_eps)
        y = np_layernorm(m * h + mlp(h), p["ln2_g"], p["ln2_b"], spec.ln_eps) if spec.mlp else h
    elif spec.kind == "pre_ln":
        h = a * x + ga * attn
        y = m * h + mlp(np_layernorm(h, p["ln2_g"], p["ln2_b"], spec.ln_eps)) if spec.mlp else h
    elif spec.kind == "parallel":  # GPT-J: both branches read LN1(x), one residual
        y = a * x + ga * attn + (mlp(ln1_x) if spec.mlp else 0.0)
    else:
        h = a * x + ga * attn
        y = m * h + mlp(h) if spec.mlp else h
    if with_mlp:
        return y, attn, w, q, k, out.get("mlp")
    return y, attn, w, q, k


def np_softmax(logits):
    m = np.max(logits, axis=-1, keepdims=True)
    e = np.exp(logits - m)
    return e / e.sum(-1, keepdims=True)


def np_attention(s, factor, v, wo, causal):
    """float64: w = softmax(factor * s) per row (masked), out = (w v) W_O, H(w_i), max_j w."""
    s = np.asarray(s, np.float64) * factor
    b, h, t, n = s.shape
    if causal:
        s = np.where(np.tril(np.ones((t, n), bool)), s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(w > 0, w * np.log(w), 0.0), -1)
    o = np.einsum("bhts,bhsk->bthk", w, np.asarray(v, np.float64))
    out = np.einsum("bthk,hkd->btd", o, np.asarray(wo, np.float64))
    return out, ent, w.max(-1)


# ----------------------------------------------------------------------------- metrics changes
def np_top(g):
    return np.linalg.eigvalsh(np.asarray(g, np.float64))[..., -1]
