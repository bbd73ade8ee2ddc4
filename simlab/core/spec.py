"""Static structure (specs), with validation.

A spec is hashable and decides what is compiled (docs/design.md, "Vocabulary"); the traced
knobs are in simlab.core.knobs. Every check names the field and the allowed range and raises
`ConfigError`, which the CLI turns into exit code 2 before any compute. The allowed kinds come
from the registries (simlab.core.block.BLOCKS, simlab.core.inputs.INPUTS,
simlab.core.patterns.PATTERNS), read live: a plugin's entries too. The [checkpoint] table's spec
is simlab.checkpoints.source.CheckpointSpec (the weight source, above core).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from simlab.core import rotary
from simlab.core import structure as structure_data
from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.patterns import PATTERNS
from simlab.errors import ConfigError
from simlab.validate import check_choice, check_fields, check_int, check_positive

# MLP activations: GELU in its tanh form ("gelu": Google's BERT code, GPT-2's gelu_new), the exact
# erf GELU ("gelu_exact": HF's "gelu", which BERT, RoBERTa and Pythia checkpoints name), ReLU,
# the identity (an ablation: a linear MLP), and SiLU z sigmoid(z) (Llama's gate, HF's "silu")
ACTIVATIONS = ("gelu", "gelu_exact", "relu", "linear", "silu")
# the weight matrices and biases whose init variance a spec may set (init_var, bias_var)
MATRICES = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
BIASES = ("bq", "bk", "bv", "bo", "b1", "b2")


def _pairs(value):
    """A TOML table {name: number} (or its JSON form, a list of [name, number] pairs) as a
    sorted tuple of pairs (hashable); None or an empty table: None. Anything else is left for
    `validate` to refuse."""
    if value is None:
        return None
    try:
        items = value.items() if isinstance(value, Mapping) else [tuple(v) for v in value]
        out = tuple(sorted((k, v) for k, v in items))
    except (TypeError, ValueError):
        return value
    return out or None


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """Static structure of a block (or a depth-`depth` stack of independent blocks).

    kind: a key of simlab.core.block.BLOCKS (the wiring; each entry states its formula).
    Set the knob attn_residual = 0 to study the bare attention sub-layer.
    pattern: the attention weights, a key of simlab.core.patterns.PATTERNS (each entry states
    its formula): "softmax" (the block's own), or a clamp that replaces them and leaves
    everything else as it is: "uniform", "shared" (one distribution over the keys for every
    query of a sequence), "token" (each query its own, on its own key) or "other" (each query
    its own, on the previous key), the last three with the sharpness of the knob pattern_beta.
    rotary_pct, rotary_base: rotary position embeddings on the first int(d_head * rotary_pct)
    dims of every head's queries and keys (simlab.core.rotary; GPT-NeoX / Pythia); 0: none.
    rotary_base is HF's rope_theta (Llama: rotary_pct = 1, every dim of a head).
    n_kv_heads: grouped-query attention (Ainslie et al. 2023): n_kv_heads key/value heads, each
    shared by n_heads / n_kv_heads consecutive query heads (HF's repeat_kv); None: n_heads.

    The block's structure as data (docs/design.md, "Blocks as data"), each None or at its
    default for the kind's own preset (simlab.core.structure.PRESETS):
    attn_norm, mlp_norm: where each branch's norms sit, "none" or places joined by "+" from
    pre (the branch's input), out (its output, before the residual) and post (the residual sum):
    "pre+out" is Peri-LN; norm: "layernorm" or "rmsnorm"; norm_gain, norm_bias: whether the
    norms have a gain and a bias; mlp_kind: "plain" or "gated" (a third matrix w3).
    w_o: the attention has an output projection W_O (false: the heads' outputs concatenated,
    n_heads * d_head = d_model; simlab.core.init sets W_O = I and b_O = 0, exact).
    head_dim: each head's width d_head (None: d_model / n_heads).
    init_var: {matrix: variance} for any of wq, wk, wv, wo, w1, w2, w3, replacing the scheme's
    sigma^2 for that matrix ("fan_in": N(0, v / fan_in); "normal", "bert": N(0, v)).
    bias_var: {bias: variance} for any of bq, bk, bv, bo, b1, b2: that bias drawn N(0, v) at init
    (else 0), drawn after every other weight so that no other spec's draws move.
    pattern_head: the one head (0 .. n_heads - 1) that a pattern with a `keeps` rule ("sink":
    key 0 removed, simlab.core.sinks) acts on; None: every head.
    scaled_head: the one head whose queries and keys the knob head_scale multiplies
    (simlab.core.head_scale); None: head_scale is inert.
    """

    kind: str = "post_ln"
    d_model: int = 768
    n_heads: int = 12
    n_kv_heads: int | None = None  # grouped-query attention: key/value heads (None: n_heads)
    mlp: bool = True
    mlp_ratio: int = 4
    d_ff: int | None = None  # the MLP's hidden width itself (None: d_model * mlp_ratio)
    activation: str = "gelu"
    mlp_center: bool = False  # ablation: remove each token's mean hidden activation before W_2
    causal: bool = False
    qk_norm: str = "none"  # "none" | "layernorm" | "rmsnorm" (per head, on q and k)
    depth: int = 1
    init: str = "bert"  # "bert" | "glorot" | "fan_in" | "normal"
    qk_weights: str = "random"  # "random" | "tied" (W_K = W_Q) | "identity" (Q = K = V = O = I)
    init_sigma: float = 1.0  # "fan_in": N(0, sigma^2 / fan_in); "normal": N(0, sigma^2)
    ln_eps: float = 1e-12  # BERT's LayerNorm epsilon
    pattern: str = "softmax"  # a key of simlab.core.patterns.PATTERNS
    rotary_pct: float = 0.0  # rotary embeddings on int(d_head * rotary_pct) dims; 0: none
    rotary_base: float = 10000.0  # theta_i = base^(-2 i / n) (simlab.core.rotary)
    # the structure as data (None / at the default: the kind's preset; docstring)
    attn_norm: str | None = None
    mlp_norm: str | None = None
    norm: str | None = None
    norm_gain: bool | None = None
    norm_bias: bool | None = None
    mlp_kind: str | None = None
    w_o: bool = True
    head_dim: int | None = None
    init_var: tuple | None = None
    bias_var: tuple | None = None
    pattern_head: int | None = None  # the one head a pattern with `keeps` (sink) acts on
    scaled_head: int | None = None  # the head the knob head_scale scales (simlab.core.head_scale)

    def __post_init__(self):
        for f in ("init_var", "bias_var"):
            object.__setattr__(self, f, _pairs(getattr(self, f)))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def structure(self) -> structure_data.Structure | None:
        """The kind's structure (simlab.core.structure) with this spec's overrides; None for a
        kind with a hand-written wiring (a plugin's)."""
        preset = BLOCKS[self.kind].structure
        if preset is None:
            return None
        return structure_data.resolve(
            preset, {f: getattr(self, f) for f in structure_data.OVERRIDES}
        )

    @property
    def norm_before_projections(self) -> bool:
        """The projections see a norm of x (layer 0 is not hoisted by linearity)."""
        s = self.structure
        return BLOCKS[self.kind].norm_before_projections if s is None else s.norm_before_projections

    @property
    def norm_after_attention(self) -> bool:
        """The token-wise rest holds a norm even without the MLP."""
        s = self.structure
        return BLOCKS[self.kind].norm_after_attention if s is None else s.norm_after_attention

    def init_variance(self, name: str) -> float | None:
        """init_var's variance for matrix `name` (None: the scheme's own)."""
        return dict(self.init_var or ()).get(name)

    def bias_variance(self, name: str) -> float:
        """bias_var's variance for bias `name` (0: the bias starts at 0)."""
        return float(dict(self.bias_var or ()).get(name, 0.0))

    def validate(self, where: str = "block") -> BlockSpec:
        check_choice(f"{where}.kind", self.kind, tuple(BLOCKS))
        check_int(f"{where}.d_model", self.d_model, 1, 1 << 16)
        check_int(f"{where}.n_heads", self.n_heads, 1, self.d_model)
        if self.head_dim is not None:
            check_int(f"{where}.head_dim", self.head_dim, 1, 1 << 16)
        elif self.d_model % self.n_heads:
            raise ConfigError(
                f"{where}.n_heads: {self.n_heads} must divide d_model={self.d_model} (or set "
                "head_dim)"
            )
        if self.n_kv_heads is not None:
            check_int(f"{where}.n_kv_heads", self.n_kv_heads, 1, self.n_heads)
            if self.n_heads % self.n_kv_heads:
                raise ConfigError(
                    f"{where}.n_kv_heads: {self.n_kv_heads} must divide n_heads={self.n_heads}"
                )
        if not isinstance(self.mlp, bool):
            raise ConfigError(f"{where}.mlp: must be true or false, got {self.mlp!r}")
        check_int(f"{where}.mlp_ratio", self.mlp_ratio, 1, 64)
        if self.d_ff is not None:
            check_int(f"{where}.d_ff", self.d_ff, 1, 1 << 20)
            if self.mlp_ratio != 4:
                raise ConfigError(
                    f"{where}.d_ff: {self.d_ff} and mlp_ratio = {self.mlp_ratio} both set the MLP "
                    "width; set one (d_ff is the width itself, mlp_ratio its multiple of d_model)"
                )
        check_choice(f"{where}.activation", self.activation, ACTIVATIONS)
        if not isinstance(self.mlp_center, bool):
            raise ConfigError(f"{where}.mlp_center: must be true or false, got {self.mlp_center!r}")
        if not isinstance(self.causal, bool):
            raise ConfigError(f"{where}.causal: must be true or false, got {self.causal!r}")
        check_choice(f"{where}.qk_norm", self.qk_norm, ("none", "layernorm", "rmsnorm"))
        check_int(f"{where}.depth", self.depth, 1, 256)
        check_choice(f"{where}.init", self.init, ("bert", "glorot", "fan_in", "normal"))
        check_choice(f"{where}.qk_weights", self.qk_weights, ("random", "tied", "identity"))
        if self.qk_weights == "tied" and self.kv_heads != self.n_heads:
            raise ConfigError(
                f"{where}.n_kv_heads: qk_weights = 'tied' (W_K = W_Q) needs n_kv_heads = n_heads, "
                f"got {self.n_kv_heads}"
            )
        if self.qk_weights == "identity" and (self.n_heads != 1 or self.d_head != self.d_model):
            raise ConfigError(
                f"{where}.n_heads: qk_weights = 'identity' needs one head (d_head = d_model), "
                f"got {self.n_heads} of width {self.d_head}"
            )
        check_positive(f"{where}.init_sigma", self.init_sigma)
        check_positive(f"{where}.ln_eps", self.ln_eps)
        check_choice(f"{where}.pattern", self.pattern, tuple(PATTERNS))
        check_positive(f"{where}.rotary_pct", self.rotary_pct, strict=False)
        if self.rotary_pct > 1:
            raise ConfigError(f"{where}.rotary_pct: {self.rotary_pct!r} must be <= 1")
        n_rot = self.rotary_dims
        if n_rot % 2:
            raise ConfigError(
                f"{where}.rotary_pct: int(d_head {self.d_head} * {self.rotary_pct}) = {n_rot} "
                "rotated dims must be even"
            )
        check_positive(f"{where}.rotary_base", self.rotary_base)
        if self.pattern_head is not None:
            check_int(f"{where}.pattern_head", self.pattern_head, 0, self.n_heads - 1)
            if PATTERNS[self.pattern].keeps is None:
                keeping = ", ".join(repr(n) for n, p in PATTERNS.items() if p.keeps is not None)
                raise ConfigError(
                    f"{where}.pattern_head: block.pattern {self.pattern!r} acts on every head; "
                    f"pattern_head picks the head of a head-wise pattern ({keeping})"
                )
        if self.scaled_head is not None:
            check_int(f"{where}.scaled_head", self.scaled_head, 0, self.n_heads - 1)
        self._validate_structure(where)
        return self

    def _validate_structure(self, where: str) -> None:
        """The structure fields (class docstring): names, ranges, and what fits together."""
        given = [f for f in structure_data.OVERRIDES if getattr(self, f) is not None]
        if given and BLOCKS[self.kind].structure is None:
            raise ConfigError(
                f"{where}.{given[0]}: block.kind {self.kind!r} has a hand-written wiring, not "
                "a structure to override; use a built-in kind"
            )
        for f in ("norm_gain", "norm_bias"):
            v = getattr(self, f)
            if v is not None and not isinstance(v, bool):
                raise ConfigError(f"{where}.{f}: must be true or false, got {v!r}")
        if self.norm is not None:
            check_choice(f"{where}.norm", self.norm, structure_data.NORMS)
        if self.mlp_kind is not None:
            check_choice(f"{where}.mlp_kind", self.mlp_kind, structure_data.MLP_KINDS)
        for f in ("attn_norm", "mlp_norm"):
            if getattr(self, f) is not None:
                structure_data.parse_places(f"{where}.{f}", getattr(self, f))
        if given:
            self.structure  # noqa: B018  (resolving checks the combination, naming the field)
        if not isinstance(self.w_o, bool):
            raise ConfigError(f"{where}.w_o: must be true or false, got {self.w_o!r}")
        if not self.w_o and self.n_heads * self.d_head != self.d_model:
            raise ConfigError(
                f"{where}.w_o: without an output projection the heads' outputs are concatenated: "
                f"n_heads * d_head = {self.n_heads * self.d_head} must equal d_model = "
                f"{self.d_model}"
            )
        for f, names in (("init_var", MATRICES), ("bias_var", BIASES)):
            v = getattr(self, f)
            if v is None:
                continue
            if not (isinstance(v, tuple) and all(isinstance(e, tuple) for e in v)):
                raise ConfigError(f"{where}.{f}: must be a table of name = variance, got {v!r}")
            for name, var in v:
                check_choice(f"{where}.{f}", name, names)
                check_positive(f"{where}.{f}.{name}", var, strict=False)
        for f in ("init_var", "bias_var"):
            if getattr(self, f) is not None and self.init == "glorot":
                raise ConfigError(
                    f"{where}.{f}: init = 'glorot' draws uniforms, not variances; use 'fan_in', "
                    "'normal' or 'bert'"
                )
        if not self.w_o and ("wo" in dict(self.init_var or ()) or self.bias_variance("bo")):
            raise ConfigError(f"{where}.w_o: false, so init_var.wo and bias_var.bo do not exist")
        if "w3" in dict(self.init_var or ()) and not (self.mlp and self.gated_mlp):
            raise ConfigError(f"{where}.init_var.w3: only a gated MLP has w3")
        if self.qk_weights != "random" and (self.init_var or self.bias_var):
            raise ConfigError(
                f"{where}.qk_weights: {self.qk_weights!r} with init_var or bias_var; use 'random'"
            )

    @property
    def mlp_width(self) -> int:
        """The MLP's hidden width F: d_ff where given, else d_model * mlp_ratio (every use reads
        it here)."""
        return self.d_ff if self.d_ff is not None else self.d_model * self.mlp_ratio

    @property
    def kv_heads(self) -> int:
        """The key/value heads (n_kv_heads, or n_heads without grouped-query attention)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def gated_mlp(self) -> bool:
        """The MLP is gated (a third matrix w3; simlab.core.wiring.gated_mlp): the structure's
        mlp kind, or the hand-written kind's `gated`."""
        s = self.structure
        return BLOCKS[self.kind].gated if s is None else s.mlp == "gated"

    @property
    def rotary_dims(self) -> int:
        """The rotated dims of each head (0: no rotary embeddings)."""
        return rotary.n_dims(self.d_head, self.rotary_pct)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """Static description of the input distribution (shape batch x length x d_model).

    kind: a key of simlab.core.inputs.INPUTS (each entry documents its distribution and the
    fields below that it reads). Every kind then gets the drift b = drift_norm * u_b (unit
    u_b per seed).
    """

    kind: str = "embedding"
    batch: int = 16
    length: int = 512
    vocab: int = 30522
    embed_std: float = 0.02
    token_dist: str = "uniform"  # "uniform" | "zipf"
    zipf_s: float = 1.1
    sigma: float = 1.0
    alpha: float = 1.0
    nu: float = 3.0
    normalize: bool = False  # tokens scaled to unit norm after the drift: x_i / |x_i|
    corpus: str = "stdlib"  # kind "text": "stdlib" or a text file or folder (checkpoints.corpus)
    # kind "text", filled in when a config is resolved (simlab.checkpoints.source.resolve_text):
    # the sha256 of the corpus's content and the tokenizer.json that cuts it, so a sweep is never
    # resumed on another text; the corpus path then does not enter the fingerprint
    text_sha256: str | None = None

    def validate(self, where: str = "inputs") -> InputSpec:
        check_choice(f"{where}.kind", self.kind, tuple(INPUTS))
        check_int(f"{where}.batch", self.batch, 1, 1 << 16)
        check_int(f"{where}.length", self.length, 2, 1 << 20)
        check_int(f"{where}.vocab", self.vocab, 2, 1 << 24)
        check_positive(f"{where}.embed_std", self.embed_std)
        check_choice(f"{where}.token_dist", self.token_dist, ("uniform", "zipf"))
        check_positive(f"{where}.zipf_s", self.zipf_s)
        check_positive(f"{where}.sigma", self.sigma)
        check_positive(f"{where}.alpha", self.alpha, strict=False)
        check_positive(f"{where}.nu", self.nu, lo=2.0)
        if not isinstance(self.normalize, bool):
            raise ConfigError(f"{where}.normalize: must be true or false, got {self.normalize!r}")
        if not isinstance(self.corpus, str) or not self.corpus:
            raise ConfigError(f"{where}.corpus: must be 'stdlib' or a path, got {self.corpus!r}")
        if self.text_sha256 is not None and not (
            isinstance(self.text_sha256, str) and len(self.text_sha256) == 64
        ):
            raise ConfigError(f"{where}.text_sha256: must be a sha256 (64 hex digits)")
        return self


def spec_from_dict(cls, d: Mapping[str, Any] | None, where: str):
    """Build a frozen spec from a TOML table, refusing unknown fields."""
    d = dict(d or {})
    check_fields(where, d, sorted(f.name for f in dataclasses.fields(cls)))
    return cls(**d).validate(where)
