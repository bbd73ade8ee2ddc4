"""A block's structure as data: where its norms sit and what they are, where its MLP reads and
what kind it is (docs/design.md, "Blocks as data").

A `Structure` says, per branch (the attention branch, then the MLP branch), at which of three
places a norm sits:
  pre:   on the branch's input, Norm(x) -> branch          (Pre-LN; Xiong et al. 2020)
  out:   on the branch's output, before the residual add   (Peri-LN with "pre": Kim et al. 2025,
         "Peri-LN", compared with Pre- and Post-LN by Karagodin et al., arXiv 2510.22026)
  post:  on the residual sum, Norm(a x + branch)           (Post-LN; BERT, Devlin et al. 2019)
any subset, written "pre", "pre+out", "none", ...; every norm of the block is `norm`
("layernorm": (x - mean) / sd * g + b; "rmsnorm": x / rms * g, Zhang & Sennrich 2019), with a
gain g and a bias b where `norm_gain` / `norm_bias` say. `mlp_reads`: "h" (the MLP follows the
attention branch: y = m h + g_M MLP(.)) or "x" (parallel branches, GPT-J / GPT-NeoX:
y = h + g_M MLP(.(x)), no skip around the MLP alone); `shared_norm`: a parallel MLP's pre-norm is
the attention branch's (GPT-J's one LayerNorm). `mlp`: "plain" act(h W_1 + b_1) W_2 + b_2 or
"gated" (act(h W_1 + b_1) * h W_3) W_2 + b_2 (Shazeer 2020). The activation, the projections
(W_O or none), the biases' and weights' init variances and the head width are BlockSpec fields
(simlab.core.spec), read by simlab.core.init.

Each branch's norms read the layer's parameters ln1 (attention) and ln2 (MLP): the first
declared place, in the order pre, out, post, uses ln1_g / ln1_b (ln2_*), a second one
ln1_<place>_g / ln1_<place>_b (e.g. Peri-LN's ln1_out_g), so the built-in kinds keep their
layout. The built-in kinds are named presets of this data (PRESETS); a BlockSpec may override any
field of its kind's preset (`attn_norm`, `mlp_norm`, `norm`, `norm_gain`, `norm_bias`,
`mlp_kind`), which gives a new block variant without a new kind in code.
"""

from __future__ import annotations

import dataclasses

from simlab.errors import ConfigError

PLACES = ("pre", "out", "post")
NORMS = ("layernorm", "rmsnorm")
MLP_KINDS = ("plain", "gated")


def parse_places(where: str, value) -> tuple[str, ...]:
    """'pre+out' -> ('pre', 'out') in the order of PLACES; 'none' or '' -> (); a tuple or list
    of places is accepted too. ConfigError naming `where` for anything else."""
    if isinstance(value, (tuple, list)):
        parts = list(value)
    elif isinstance(value, str):
        parts = [] if value.strip() in ("", "none") else value.split("+")
    else:
        raise ConfigError(f"{where}: must be 'none' or places joined by '+' (pre, out, post)")
    parts = [p.strip() if isinstance(p, str) else p for p in parts]
    bad = [p for p in parts if p not in PLACES]
    if bad or len(set(parts)) != len(parts):
        raise ConfigError(
            f"{where}: {value!r} must be 'none' or distinct places joined by '+' from "
            f"{', '.join(PLACES)} (e.g. 'pre', 'post', 'pre+out')"
        )
    return tuple(p for p in PLACES if p in parts)


def places_name(places: tuple[str, ...]) -> str:
    """('pre', 'out') -> 'pre+out'; () -> 'none'."""
    return "+".join(places) or "none"


@dataclasses.dataclass(frozen=True)
class Structure:
    """Where a block's norms sit and what they are, and its MLP (module docstring)."""

    attn_norm: tuple[str, ...]
    mlp_norm: tuple[str, ...]
    norm: str = "layernorm"
    norm_gain: bool = True
    norm_bias: bool = True
    mlp_reads: str = "h"
    shared_norm: bool = False
    mlp: str = "plain"

    def __post_init__(self):
        for f in ("attn_norm", "mlp_norm"):
            object.__setattr__(self, f, parse_places(f"block.{f}", getattr(self, f)))

    def check(self, where: str = "block") -> Structure:
        if self.norm not in NORMS:
            raise ConfigError(f"{where}.norm: {self.norm!r} is not one of {', '.join(NORMS)}")
        for f in ("norm_gain", "norm_bias", "shared_norm"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"{where}.{f}: must be true or false")
        if self.mlp not in MLP_KINDS:
            raise ConfigError(
                f"{where}.mlp_kind: {self.mlp!r} is not one of {', '.join(MLP_KINDS)}"
            )
        if self.mlp_reads not in ("h", "x"):
            raise ConfigError(f"{where}.mlp_reads: {self.mlp_reads!r} is not 'h' or 'x'")
        if self.mlp_reads == "x" and "post" in self.attn_norm:
            raise ConfigError(
                f"{where}.attn_norm: a parallel block (the MLP reads x) has no norm of the "
                "attention residual alone ('post'); use 'pre' or 'pre+out'"
            )
        if self.mlp_reads == "x" and "post" in self.mlp_norm:
            raise ConfigError(
                f"{where}.mlp_norm: a parallel block has no residual sum of the MLP alone to "
                "normalise ('post'); use 'pre' or 'pre+out'"
            )
        if self.shared_norm and (self.mlp_reads != "x" or "pre" not in self.attn_norm):
            raise ConfigError(
                f"{where}.attn_norm: a shared norm needs parallel branches with a 'pre' norm"
            )
        return self

    @property
    def norm_before_projections(self) -> bool:
        """The projections see a norm of x (layer 0 cannot be hoisted by linearity)."""
        return "pre" in self.attn_norm

    @property
    def norm_after_attention(self) -> bool:
        """The token-wise rest holds a norm even without the MLP."""
        return "out" in self.attn_norm or "post" in self.attn_norm

    @property
    def has_norm(self) -> bool:
        return bool(self.attn_norm or self.mlp_norm)

    @property
    def post_ln(self) -> bool:
        """Only Post-LN norms: a norm after each residual sum, none before or on a branch (the
        order parameters of every layer's input are then normalised: simlab.theory.signal)."""
        return self.attn_norm == ("post",) and self.mlp_norm == ("post",)

    def leaf(self, branch: int, place: str) -> str:
        """The parameter prefix of branch `branch`'s (1: attention, 2: MLP) norm at `place`: the
        first declared place uses ln<branch>, another ln<branch>_<place>; a shared MLP pre-norm
        is the attention's ln1."""
        if branch == 2 and place == "pre" and self.shared_norm:
            return "ln1"
        places = self.attn_norm if branch == 1 else self.mlp_norm
        return f"ln{branch}" if place == places[0] else f"ln{branch}_{place}"

    def extra_leaves(self) -> tuple[str, ...]:
        """The norm parameter prefixes beyond ln1 and ln2 (a second norm on a branch)."""
        return tuple(
            f"ln{b}_{p}"
            for b, places in ((1, self.attn_norm), (2, self.mlp_norm))
            for p in places[1:]
        )

    def formula(self) -> str:
        """The layer's formula from the data, e.g. 'h = LN(a x + Attn(x)); y = LN(m h + MLP(h))'."""
        n = "RMS" if self.norm == "rmsnorm" else "LN"

        def wrap(places, place, s):
            return f"{n}({s})" if place in places else s

        at = wrap(self.attn_norm, "out", f"Attn({wrap(self.attn_norm, 'pre', 'x')})")
        h = wrap(self.attn_norm, "post", f"a x + {at}")
        mlp = "GLU" if self.mlp == "gated" else "MLP"
        src = "h" if self.mlp_reads == "h" else "x"
        f = wrap(self.mlp_norm, "out", f"{mlp}({wrap(self.mlp_norm, 'pre', src)})")
        if self.mlp_reads == "x":
            return f"y = a x + {at} + {f}"
        return f"h = {h}; y = {wrap(self.mlp_norm, 'post', f'm h + {f}')}"


# The built-in kinds as data (simlab.core.block registers one BlockKind per preset).
PRESETS: dict[str, Structure] = {
    "attention": Structure((), ()),
    "post_ln": Structure(("post",), ("post",)),
    "pre_ln": Structure(("pre",), ("pre",)),
    "parallel": Structure(("pre",), ("pre",), mlp_reads="x", shared_norm=True),
    "parallel2": Structure(("pre",), ("pre",), mlp_reads="x"),
    "llama": Structure(("pre",), ("pre",), norm="rmsnorm", norm_bias=False, mlp="gated"),
}

# BlockSpec field -> Structure field it overrides (None in the spec: the kind's preset)
OVERRIDES = {
    "attn_norm": "attn_norm",
    "mlp_norm": "mlp_norm",
    "norm": "norm",
    "norm_gain": "norm_gain",
    "norm_bias": "norm_bias",
    "mlp_kind": "mlp",
}


def resolve(preset: Structure, overrides: dict, where: str = "block") -> Structure:
    """The preset with a spec's overrides (`OVERRIDES`, None left out), checked."""
    given = {OVERRIDES[k]: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(preset, **given).check(where) if given else preset
