"""Conformance checks: what simlab's own tests run for every registry entry, one call per kind of
entry, so that a new block kind, input kind, metric or attention pattern (built in or a
plugin's) gets the project's guarantees with one test:

    from simlab import testing
    def test_my_block():
        testing.check_block_kind("sandwich")

Each check builds small labs (d_model 16, 4 heads, depth 2, fan_in init, 2 x 12 tokens) that use
the entry (an input kind of trained layers, `InputKind.trained`, on layers 1..2 of
`random_checkpoint`, a BERT-layout checkpoint of random weights held in memory), and asserts:
  paths      the default Lab (hoisted projections, factored logits where the block allows,
             tiles small enough that every tile loop runs) equals the plain oracle
             Lab(hoist=False, factor=False, tiled=False) within PATH_TOL (float32 rounding: the
             same math, reassociated), at knob points that really differ;
  float64    the same seed under `jax.enable_x64(True)` draws the same sample (every random
             number is drawn in float32 and cast) and agrees with float32 within X64_TOL
             (absolute) plus X64_RTOL (relative);
  extremes   every metric finite at the corners of the knobs' promised ranges (docs/config.md,
             "Numerics") and inside its declared mathematical range `Metric.bounds`, on the
             default path's Lab (its small tiles: every tile loop; the engine's own tiles at the
             extremes are tests/core/test_numerics.py's);
  identity   `run_sweep` gives bit-identical arrays for chunks of 1, 2 and 8 micro-batches and
             on one and two devices (when the process has several).
The building blocks (`block_cases`, `input_cases`, `path_outputs`, ...) run many labs in one
compiled call, which compiles about twice as fast as one call per lab.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import pathlib
from collections.abc import Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import simlab.checkpoints  # noqa: F401  (registers the trained input kinds)
from simlab.checkpoints.checkpoint import Checkpoint, Weights
from simlab.core import inputs, patterns
from simlab.core.block import BLOCKS
from simlab.core.init import init_params
from simlab.core.inputs import INPUTS
from simlab.core.knobs import KNOBS, inert_knobs, knob_arrays
from simlab.core.lab import Lab
from simlab.core.metrics import METRICS
from simlab.core.patterns import PATTERNS
from simlab.core.spec import BlockSpec, InputSpec
from simlab.engine.sweep import run_sweep

PATH_TOL = 2e-5  # absolute and relative: ~20x the float32 reassociation measured on these sizes
X64_TOL = 1e-4  # float64 vs float32 on the same sample (absolute, values of order 1)
X64_RTOL = 1e-6  # and relative: ~8 float32 ulp, for metrics of large magnitude (a norm ~1e3)
BOUND_TOL = 1e-5  # a metric may pass its exact bound by a few float32 ulp
SEED = 0

# knob points at which the paths are compared: the defaults, a point moving every common knob,
# and a sharp point
POINTS: tuple[dict[str, float], ...] = (
    {},
    dict(
        q_scale=4.0,
        k_scale=0.5,
        temperature=0.5,
        q_shift=1.5,
        k_shift=2.0,
        drift_norm=2.5,
        input_corr=0.3,
        attn_residual=0.5,
        mlp_residual=0.8,
        qk_norm_gain=2.0,
        attn_gain=0.7,
        mlp_gain=1.3,
        pattern_beta=1.5,
    ),
    dict(q_scale=30.0, k_scale=30.0, drift_norm=10.0, pattern_beta=6.0),
)
# the corners of the promised knob ranges (docs/config.md, "Numerics")
EXTREMES: dict[str, tuple[float, ...]] = dict(
    lam=(0.0, 1e6),
    temperature=(1e-6, 1e6),
    drift_norm=(0.0, 1e8),
    q_shift=(0.0, 1e8),
    qk_norm_gain=(1e-6, 1e6),
    pattern_beta=(0.0, 1e8),
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One small lab: a block spec and an input spec (and the metrics to compute); weights: the
    trained layers it runs (for a trained input kind), else None (drawn weights)."""

    block: BlockSpec
    inputs: InputSpec
    metrics: tuple[str, ...] | None = None
    weights: Weights | None = None

    @property
    def name(self) -> str:
        b = self.block
        return (
            f"{b.kind}-{self.inputs.kind}-causal{b.causal}-{b.qk_norm}"
            + ("-nomlp" if not b.mlp else "")
            + ("-trained" if self.weights is not None else "")
        )

    def lab(self, **kw) -> Lab:
        return Lab(self.block, self.inputs, self.metrics, weights=self.weights, **kw)

    def knob_points(self, points: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
        """The points without the knobs this case ignores (an inert knob stays at its default)."""
        inert = inert_knobs(self.block, self.inputs, INPUTS[self.inputs.kind].knobs)
        return [{k: v for k, v in p.items() if k not in inert} for p in points]


def small_block(kind: str, **kw) -> BlockSpec:
    """A small block of `kind` with the kind's typical fields (BlockKind.typical: e.g. Llama's
    SiLU gate, grouped-query attention and rotary embeddings), then `kw`."""
    base = dict(kind=kind, d_model=16, n_heads=4, mlp_ratio=2, depth=2, init="fan_in")
    return BlockSpec(**{**base, **BLOCKS[kind].typical, **kw})


def small_inputs(kind: str, **kw) -> InputSpec:
    base = dict(kind=kind, batch=2, length=12, vocab=40, embed_std=1.0)
    if kind == "text":  # a small text that ships with simlab (the standard library's is large)
        base["corpus"] = str(SMALL_CORPUS)
    return InputSpec(**{**base, **kw})


# the corpus of the "text" kind's conformance cases: simlab's own docs of its configs
SMALL_CORPUS = pathlib.Path(__file__).resolve().parent / "configs" / "default.toml"
# the words of tiny_tokenizer_json, most frequent English words and punctuation first
TINY_WORDS = (
    ". , the of a to and in is ( ) : = for be it that with as on this or by are an if "
    "not from at value # - default one each per all its - [ ] number seed grid knob block "
    "inputs sweep axes model layer token tokens text attention head heads drift scale width "
    "name names file files run runs point points when what which how then than true false "
    "none no only can every time also but has have more most other out over same so some "
    "such up use used was were will would"
).split()


def tiny_tokenizer_json(vocab: int = 100) -> str:
    """The text of a tokenizer.json (HuggingFace `tokenizers`' format) of a tiny BERT-style
    tokenizer: BERT's normaliser (lower case) and pre-tokenizer, a WordLevel vocabulary of
    [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3 and the first vocab - 4 distinct TINY_WORDS, and BERT's
    single-sequence template [CLS] $A [SEP]. random_checkpoint carries it (the "text" kind's
    conformance cases); tests/fixtures/make_tokenizer.py writes it beside the BERT fixture."""
    import json

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    words = list(dict.fromkeys(TINY_WORDS))[: max(0, vocab - len(special))]
    ids = {w: i for i, w in enumerate(special + words)}
    flags = dict(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": ids[t], "content": t, **flags} for t in special],
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 1}},
            ],
            "special_tokens": {
                t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")
            },
        },
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": ids, "unk_token": "[UNK]"},
    }
    return json.dumps(tok, indent=1) + "\n"


@functools.lru_cache(maxsize=8)
def random_checkpoint(
    d_model: int = 16, n_heads: int = 4, n_layers: int = 3, vocab: int = 40, positions: int = 512
) -> Checkpoint:
    """A BERT-layout checkpoint of random weights held in memory (no files; the architecture
    "bert" of simlab.checkpoints.architectures): the layers as simlab.core.init draws a post-LN
    stack at fan_in scale (N(0, 1 / fan_in)), the word and position tables N(0, 1) and
    N(0, 0.1^2), token type 0, the embedding LayerNorm at gain 1 and bias 0. The trained input
    kinds' conformance cases run on its layers 1..2 (layer 0 below them makes their inputs)."""
    fields = dict(
        kind="post_ln",
        d_model=d_model,
        n_heads=n_heads,
        mlp_ratio=2,
        activation="gelu_exact",
        causal=False,
        ln_eps=1e-12,
    )
    kp, kw, kpos = jax.random.split(jax.random.PRNGKey(SEED), 3)
    spec = BlockSpec(**fields, depth=n_layers, init="fan_in")
    params = {k: np.asarray(v) for k, v in init_params(spec, kp, jnp.float32).items()}
    zeros = np.zeros(d_model, np.float32)
    tables = dict(
        word=np.asarray(jax.random.normal(kw, (vocab, d_model), jnp.float32)),
        position=0.1 * np.asarray(jax.random.normal(kpos, (positions, d_model), jnp.float32)),
        type=zeros,
        ln_g=zeros + 1,
        ln_b=zeros,
    )
    return Checkpoint(
        folder=pathlib.Path("<simlab.testing.random_checkpoint>"),
        architecture="bert",
        fields=fields,
        params=params,
        tables=tables,
        hashes={"random_checkpoint": f"seed {SEED}, d_model {d_model}, vocab {vocab}"},
        n_layers=n_layers,
        vocab=vocab,
        max_positions=positions,
        tokenizer_json=tiny_tokenizer_json(vocab),
    )


def weights_for(kind: str, d_model: int = 16, vocab: int = 40) -> Weights | None:
    """None for an input kind any Lab draws; for a trained kind (`InputKind.trained`) layers 1
    and 2 of random_checkpoint(d_model, vocab=vocab)."""
    if not INPUTS[kind].trained:
        return None
    return random_checkpoint(d_model, vocab=vocab).at([1, 2])


def trained_case(kind: str, metrics: tuple[str, ...] | None = None) -> Case:
    """The case of a trained input kind: the checkpoint's own block (post-LN, not causal, no
    QK-norm: on trained layers only pattern and depth may be set) on weights_for(kind)."""
    w = weights_for(kind)
    return Case(w.checkpoint.block(2), small_inputs(kind), metrics, weights=w)


def block_cases(kinds: Iterable[str] | None = None) -> list[Case]:
    """Two cases per block kind: (not causal, no QK-norm, gaussian inputs) and (causal,
    LayerNorm QK-norm, embedding inputs)."""
    out = []
    for kind in BLOCKS if kinds is None else kinds:
        out.append(Case(small_block(kind), small_inputs("gaussian")))
        out.append(
            Case(small_block(kind, causal=True, qk_norm="layernorm"), small_inputs("embedding"))
        )
    return out


def input_cases(kinds: Iterable[str] | None = None) -> list[Case]:
    """Two cases per input kind: a post-LN block (hoisted and factored paths) and a causal
    pre-LN block (a norm before the projections: the plain path)."""
    out = []
    for kind in INPUTS if kinds is None else kinds:
        if INPUTS[kind].trained:  # one case: the trained layers' own block
            out.append(trained_case(kind))
            continue
        out.append(Case(small_block("post_ln"), small_inputs(kind)))
        out.append(Case(small_block("pre_ln", causal=True), small_inputs(kind)))
    return out


def covering_cases(metrics: Sequence[str] | None = None) -> list[Case]:
    """The fewest cases in which every block kind and every input kind appears: the block kinds
    and the input kinds each cycled, variants alternating between (not causal, no QK-norm) and
    (causal, LayerNorm QK-norm). A block kind whose turn fell on a trained input kind (those
    run the trained layers' own block) gets a case of its own at the end."""
    kinds, inputs = list(BLOCKS), list(INPUTS)
    n = max(len(kinds), len(inputs))
    plain = [k for k in inputs if not INPUTS[k].trained]
    out = []
    for i in range(n):
        variant = {} if i % 2 == 0 else dict(causal=True, qk_norm="layernorm")
        if INPUTS[inputs[i % len(inputs)]].trained:
            out.append(
                trained_case(inputs[i % len(inputs)], None if metrics is None else tuple(metrics))
            )
            continue
        out.append(
            Case(
                small_block(kinds[i % len(kinds)], **variant),
                small_inputs(inputs[i % len(inputs)]),
                None if metrics is None else tuple(metrics),
            )
        )
    seen = {c.block.kind for c in out}
    for i, kind in enumerate(k for k in kinds if k not in seen):
        variant = {} if i % 2 == 0 else dict(causal=True, qk_norm="layernorm")
        out.append(
            Case(
                small_block(kind, **variant),
                small_inputs(plain[i % len(plain)]),
                None if metrics is None else tuple(metrics),
            )
        )
    return out


def pattern_cases(names: Iterable[str] | None = None) -> list[Case]:
    """Two cases per attention pattern: a post-LN block with gaussian inputs (hoisted layer 0)
    and a causal pre-LN block with LayerNorm QK-norm and embedding inputs."""
    out = []
    for name in PATTERNS if names is None else names:
        out.append(Case(small_block("post_ln", pattern=name), small_inputs("gaussian")))
        out.append(
            Case(
                small_block("pre_ln", causal=True, qk_norm="layernorm", pattern=name),
                small_inputs("embedding"),
            )
        )
    return out


def metric_cases(names: Sequence[str]) -> list[Case]:
    """One case per block kind that can compute `names` (inputs rotating over the input kinds):
    a metric reading the MLP branch's output (`Metric.reads` "mlp") leaves out the kinds
    without token_wise_mlp, which the Lab refuses for it (a plugin's kind may have none); one
    reading the token ids ("ids") rotates over the input kinds that have them."""
    reads_mlp = any("mlp" in METRICS[n].reads for n in names)
    reads_ids = any("ids" in METRICS[n].reads for n in names)
    kinds = [k for k, b in BLOCKS.items() if not (reads_mlp and b.token_wise_mlp is None)]
    inputs = itertools.cycle(
        [k for k, i in INPUTS.items() if not i.trained and not (reads_ids and i.ids is None)]
    )
    return [Case(small_block(kind), small_inputs(next(inputs)), tuple(names)) for kind in kinds]


def _stacked(points: Sequence[Mapping[str, float]]) -> dict[str, jax.Array]:
    arrays = [knob_arrays(p) for p in points]
    return {k: jnp.stack([a[k] for a in arrays]) for k in KNOBS}


def run_labs(labs: Sequence[Lab], cases: Sequence[Case], points=POINTS) -> list[dict]:
    """Each lab at its case's knob points (vmapped), all in one compiled call."""
    return _run(labs, [c.knob_points(points) for c in cases])


def _run(labs: Sequence[Lab], points: Sequence[Sequence[Mapping[str, float]]]):
    """Every lab at its points (vmapped), all in one compiled call; metrics as float64 numpy."""
    states = [lab.seed_state(jax.random.PRNGKey(SEED)) for lab in labs]
    kns = [_stacked(p) for p in points]
    outs = jax.jit(
        lambda sts, ks: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, k) for lab, st, k in zip(labs, sts, ks)
        ]
    )(states, kns)
    return [{k: np.asarray(v, np.float64) for k, v in o.items()} for o in outs]


# ------------------------------------------------------------------------------ paths
# the plain oracle and the default Lab (hoisted projections and factored logits where the block
# allows, tiles of 2 query rows x 4 heads x 12 keys so that every tile loop runs)
PATHS = {
    "plain": dict(hoist=False, factor=False, tiled=False),
    "default": dict(tile_elements=2 * 4 * 12),
}


def path_outputs(cases: Sequence[Case], points=POINTS) -> list[dict[str, dict]]:
    """Per case: path name -> metric -> (points, depth) array (one compiled call for all)."""
    return path_and_extreme_outputs(cases, points, extremes=False)[0]


def path_and_extreme_outputs(
    cases: Sequence[Case], points=POINTS, extremes: bool = True
) -> tuple[list[dict[str, dict]], list[dict] | None]:
    """path_outputs and, from the same compiled call, extreme_outputs: the default path's Lab
    runs its case's knob points followed by its extreme points (one program per Lab instead of
    two: the compile is most of a conformance check's time)."""
    labs, pts, split = [], [], []
    for c in cases:
        for name, kw in PATHS.items():
            labs.append(c.lab(**kw))
            p = c.knob_points(points)
            split.append(len(p))
            pts.append(p + extreme_points(c) if extremes and name == "default" else p)
    outs = _run(labs, pts)
    n = len(PATHS)
    paths, ext = [], []
    for i in range(len(cases)):
        per = outs[i * n : (i + 1) * n]
        cut = [{m: a[: split[i * n + j]] for m, a in o.items()} for j, o in enumerate(per)]
        paths.append(dict(zip(PATHS, cut)))
        d = per[list(PATHS).index("default")]
        ext.append({m: a[split[i * n] :] for m, a in d.items()})
    return paths, (ext if extremes else None)


def assert_paths_agree(case: Case, out: Mapping[str, dict], tol: float = PATH_TOL) -> None:
    """Every path equals the plain oracle within tol (abs and rel), on points that differ."""
    plain = out["plain"]
    for path, got in out.items():
        assert set(got) == set(plain), (case.name, path)
        for m, arr in got.items():
            np.testing.assert_allclose(
                arr, plain[m], rtol=tol, atol=tol, err_msg=f"{case.name}: {path} vs plain, {m}"
            )
    pattern = PATTERNS[case.block.pattern]
    if "attn_entropy" in plain and (pattern.reads_logits or pattern.sharpens):
        # not vacuous: the knob points move the attention (a fixed clamp's rows never move)
        assert np.ptp(plain["attn_entropy"][:, 0]) > 1e-3, f"{case.name}: points do not differ"


# ------------------------------------------------------------------------------ float64
def x64_outputs(cases: Sequence[Case], points=POINTS) -> list[dict]:
    """Metrics of each case's default Lab at the points under `jax.enable_x64(True)`, the same
    seed (compare with path_outputs(...)["default"], the float32 run)."""
    with jax.enable_x64(True):
        return _run(
            [c.lab(**PATHS["default"]) for c in cases], [c.knob_points(points) for c in cases]
        )


def assert_x64_agrees(case: Case, f32: Mapping, f64: Mapping, tol: float = X64_TOL) -> None:
    assert set(f32) == set(f64), case.name
    for m in f32:
        np.testing.assert_allclose(
            f64[m], f32[m], rtol=X64_RTOL, atol=tol, err_msg=f"{case.name}: {m}"
        )


def assert_really_float64(case: Case) -> None:
    """Under x64 the seed state, the knobs and the metrics are float64 (not silently float32)."""
    with jax.enable_x64(True):
        lab = case.lab()
        state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(SEED))
        out = jax.eval_shape(lab.point, state, knob_arrays({}))
        dts = {str(a.dtype) for a in jax.tree.leaves((state, out)) if a.dtype.kind == "f"}
    assert dts == {"float64"}, (case.name, dts)


# ------------------------------------------------------------------------------ extremes
def extreme_points(case: Case) -> list[dict[str, float]]:
    """Every corner of EXTREMES (lam drives q_scale and k_scale) the case's knobs allow, plus
    a mid-range point."""
    inert = inert_knobs(case.block, case.inputs, INPUTS[case.inputs.kind].knobs)
    names = [n for n in EXTREMES if n == "lam" or n not in inert]
    out = []
    for values in itertools.product(*(EXTREMES[n] for n in names)):
        p = dict(zip(names, values))
        lam = p.pop("lam")
        out.append(dict(p, q_scale=lam, k_scale=lam))
    return out + [dict(q_scale=3.0, k_scale=3.0, temperature=0.3, drift_norm=2.0)]


def extreme_outputs(cases: Sequence[Case]) -> list[dict]:
    """Per case: metric -> (extreme points, depth) of its default-path Lab (PATHS["default"]:
    tiles small enough that every tile loop runs)."""
    return _run([c.lab(**PATHS["default"]) for c in cases], [extreme_points(c) for c in cases])


def assert_finite_and_in_bounds(case: Case, out: Mapping[str, np.ndarray]) -> None:
    """Every metric finite at every extreme point and inside its Metric.bounds."""
    pts = extreme_points(case)
    for m, arr in out.items():
        flat = arr.reshape(len(pts), -1)
        bad = [pts[i] for i in np.nonzero(~np.isfinite(flat).all(1))[0]]
        assert not bad, f"{case.name}: {m} not finite at {bad[:3]}"
        lo, hi = METRICS[m].bounds
        assert np.all(arr >= lo - BOUND_TOL) and np.all(arr <= hi + BOUND_TOL), (
            f"{case.name}: {m} outside its bounds [{lo}, {hi}]: {arr.min()}..{arr.max()}"
        )


# ------------------------------------------------------------------------------ identity
def sweep_config(case: Case) -> dict:
    """A small sweep of the case: drift N x lambda (3 x 5 points), 2 seeds, micro-batch 2."""
    cfg = dict(
        block=dataclasses.asdict(case.block),
        inputs=dataclasses.asdict(case.inputs),
        axes=[
            dict(name="drift_norm", values=[0.0, 1.0, 10.0]),
            dict(name="lambda", knobs=["q_scale", "k_scale"], values=[0.3, 1.0, 3.0, 10.0, 30.0]),
        ],
        sweep=dict(seeds=2, micro_batch=2),
    )
    if case.metrics is not None:
        cfg["sweep"]["metrics"] = list(case.metrics)
    return cfg


def assert_sweeps_identical(case: Case, devices: Sequence[int] | None = None) -> None:
    """run_sweep bit-identical for chunks of 1, 2 and 8 micro-batches and on each device count
    in `devices` (default 1 and 2, or 1 alone in a process with one device; force CPU devices
    with jax's `jax_num_cpu_devices` or XLA_FLAGS=--xla_force_host_platform_device_count)."""

    if devices is None:
        devices = (1, 2) if jax.local_device_count() >= 2 else (1,)
    cfg = sweep_config(case)
    lab = None if case.weights is None else case.lab()  # trained layers: given to the sweep
    ref = run_sweep(cfg, lab=lab, out=None, quiet=True, chunk_size=4, devices=1).metrics
    # chunks of 1, 2 and 8 micro-batches of 2 points on one device; 2 per device on several
    # (each device's program then has the shape of the one-device run's: compiled once each)
    runs = [(2, 1), (16, 1)] + [(4 * d, d) for d in devices if d > 1]
    for chunk, dev in runs:
        got = run_sweep(cfg, lab=lab, out=None, quiet=True, chunk_size=chunk, devices=dev).metrics
        for m in ref:
            np.testing.assert_array_equal(
                got[m], ref[m], err_msg=f"{case.name}: {m}, chunk {chunk}, {dev} devices"
            )


# ------------------------------------------------------------------------------ one entry
def check_cases(cases: Sequence[Case], identity: bool = True) -> None:
    """Every check on the given cases (paths, float64, extremes and bounds, identity)."""
    paths, extremes = path_and_extreme_outputs(cases)
    for case, out, f64 in zip(cases, paths, x64_outputs(cases)):
        assert_paths_agree(case, out)
        assert_x64_agrees(case, out["default"], f64)
        assert_really_float64(case)
    for case, out in zip(cases, extremes):
        assert_finite_and_in_bounds(case, out)
    if identity:
        for case in cases:
            assert_sweeps_identical(case)


def check_block_kind(kind: str, identity: bool = True) -> None:
    """Every check for one block kind of simlab.core.block.BLOCKS (block_cases)."""
    assert kind in BLOCKS, f"{kind!r} is not a registered block kind"
    check_cases(block_cases([kind]), identity)


def check_input_kind(kind: str, identity: bool = True) -> None:
    """Every check for one input kind of simlab.core.inputs.INPUTS (input_cases), plus the
    drift: x(N) - x(0) = N u_b exactly for every token."""
    assert kind in INPUTS, f"{kind!r} is not a registered input kind"
    assert_drift_is_common_shift(kind)
    check_cases(input_cases([kind]), identity)


def check_pattern(name: str, identity: bool = True) -> None:
    """Every check for one attention pattern of simlab.core.patterns.PATTERNS (pattern_cases),
    and for a clamp its targets, weights and closed forms (assert_clamp_closed_forms)."""
    assert name in PATTERNS, f"{name!r} is not a registered attention pattern"
    if not PATTERNS[name].reads_logits:
        assert_clamp_closed_forms(name)
    check_cases(pattern_cases([name]), identity)


def check_metric(name: str, identity: bool = True) -> None:
    """Every check for one metric of simlab.core.metrics.METRICS, on every block kind."""
    assert name in METRICS, f"{name!r} is not a registered metric"
    lo, hi = METRICS[name].bounds
    assert lo <= hi, f"{name}: bounds {lo} > {hi}"
    check_cases(metric_cases([name]), identity)


def assert_drift_is_common_shift(kind: str) -> None:
    """The input kind's draw plus the drift: x(N) - x(0) = N u_b (unit u_b) for every token,
    the other knobs fixed (float32 rounding of the sum)."""

    spec = small_inputs(kind)
    comps = inputs.components(spec, 16, jax.random.PRNGKey(SEED), weights=weights_for(kind))
    knobs = {n: jnp.asarray(k.default, jnp.float32) for n, k in KNOBS.items()}
    x0 = inputs.assemble(spec, 16, comps, inputs.coefficients(kind, knobs))
    n = 3.0
    xn = inputs.assemble(
        spec, 16, comps, inputs.coefficients(kind, {**knobs, "drift_norm": jnp.float32(n)})
    )
    u = np.asarray(comps["u_b"], np.float64).reshape(-1)
    assert abs(np.linalg.norm(u) - 1) < 1e-6, kind
    diff = np.asarray(xn, np.float64) - np.asarray(x0, np.float64)
    scale = 1 + float(np.max(np.abs(np.asarray(x0))))
    np.testing.assert_allclose(diff, np.broadcast_to(n * u, diff.shape), atol=1e-5 * scale)


def assert_clamp_closed_forms(name: str, t: int = 7) -> None:
    """A clamp's targets and closed forms in float64, T = S = t, causal and not, beta in
    {0, 0.7, 5, 1e8}: every target t_i is a key in [0, S), attended (t_i <= i) under the causal
    mask; the full weights (simlab.core.patterns.weights) equal numpy's p_i at t_i and o_i at
    the other attended keys (0 where masked), and each row sums to 1; the closed-form entropy
    and maximum equal -sum_j w log w and max_j w of those weights; the O(T D) A V W_O
    (simlab.core.patterns.attend) equals (w V) W_O."""

    entry = PATTERNS[name]
    r = np.random.default_rng(SEED)
    b, h, k, d = 2, 2, 3, 5
    v = r.standard_normal((b, t, h, k))
    wo = r.standard_normal((h, k, d))
    with jax.enable_x64(True):
        for causal in (False, True):
            n = np.arange(1, t + 1) if causal else np.full(t, t)
            if entry.target is not None:
                tgt = np.asarray(entry.target(t, t, causal))
                assert tgt.shape == (t,) and tgt.dtype.kind in "iu", (name, tgt)
                assert np.all((tgt >= 0) & (tgt < n)), (name, causal, tgt)
            for beta in (0.0, 0.7, 5.0, 1e8):
                e = np.exp(-beta) if entry.sharpens else 1.0
                o, p = e / (1.0 + (n - 1) * e), 1.0 / (1.0 + (n - 1) * e)
                want = np.where(np.arange(t)[None, :] < n[:, None], o[:, None], 0.0)
                if entry.target is not None:
                    want[np.arange(t), tgt] = p
                b64 = jnp.float64(beta)
                w = np.asarray(patterns.weights(name, b64, 1, 1, t, t, causal, jnp.float64))[0, 0]
                np.testing.assert_allclose(w, want, rtol=1e-13, atol=0, err_msg=f"{name} weights")
                np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-13)
                out, h_T, max_T = patterns.attend(name, b64, v, wo, causal)
                ent = -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1)
                np.testing.assert_allclose(h_T, ent, rtol=1e-12, atol=1e-13, err_msg=name)
                np.testing.assert_allclose(max_T, w.max(-1), rtol=1e-13, err_msg=name)
                np.testing.assert_allclose(
                    out,
                    np.einsum("ts,bshk,hkd->btd", w, v, wo),
                    rtol=1e-12,
                    atol=1e-12,
                    err_msg=f"{name}: closed-form A V",
                )
