"""A trained checkpoint in the lab's own layout: `load(path)` -> `Checkpoint`.

`Checkpoint` holds every layer's weights stacked on a leading layer axis (the layout of
simlab.core.init, numpy, as stored: float32, or float16/bfloat16 widened to float32), the
embedding tables, the BlockSpec fields of one layer (`fields`), and the sha256 of its files
(`hashes`, the identity a sweep fingerprints). `at(layers)` picks a contiguous range of layers
for a Lab; `embed(ids)` makes the architecture's input embeddings of token ids;
`hidden_states(ids)` runs the checkpoint (the oracle tests compare it with HF's forward).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pathlib
import re
import weakref
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from simlab.checkpoints import files, gguf_file, models
from simlab.checkpoints.architectures import ARCHITECTURES, Config, Tensors
from simlab.core import block as blocks
from simlab.core import geometry
from simlab.core.inputs import INPUTS
from simlab.core.knobs import knob_arrays
from simlab.core.spec import BlockSpec, InputSpec
from simlab.core.tiled import choose_tiling
from simlab.errors import ConfigError

# the tokenizer of a checkpoint folder (read by the input kind "text", simlab.checkpoints.inputs)
TOKENIZER = "tokenizer.json"
# architecture settings of the embeddings, not of the block
EMBEDDING_FIELDS = ("padding_idx",)


@dataclasses.dataclass(frozen=True, eq=False)
class Checkpoint:
    """A loaded checkpoint (see the module docstring). params: name -> (n_layers, ...) numpy
    in the lab's layout; tables: the embedding tables; fields: BlockSpec fields of one layer
    plus the embeddings' settings (EMBEDDING_FIELDS)."""

    folder: pathlib.Path
    architecture: str
    fields: Mapping
    params: Mapping[str, np.ndarray]
    tables: Mapping[str, np.ndarray]
    hashes: Mapping[str, str]
    n_layers: int
    vocab: int
    max_positions: int  # 0: no limit (rotary positions)
    tokenizer_json: str | None = None  # its tokenizer.json's text (None: read from the folder)
    # the positions it was trained on (config.json's max_position_embeddings; 0: not given),
    # beyond which rotary positions extrapolate (simlab.engine.cautions warns)
    trained_positions: int = 0
    # dtype name -> (params, tables) as jax arrays, made on first use (on_device)
    _device: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    def tokenizer_text(self) -> str | None:
        """The text of its tokenizer.json: the one held (tokenizer_json), else read from its
        folder when the input kind "text" asks (None: it has none)."""
        if self.tokenizer_json is not None:
            return self.tokenizer_json
        path = self.folder / TOKENIZER
        return path.read_text() if path.is_file() else None

    def block_fields(self) -> dict:
        """The BlockSpec fields of one layer (kind, d_model, n_heads, activation, ...)."""
        return {k: v for k, v in self.fields.items() if k not in EMBEDDING_FIELDS}

    def block(self, depth: int = 1, **overrides) -> BlockSpec:
        """A BlockSpec of `depth` of this checkpoint's layers; `overrides`: the fields a study
        may change (e.g. pattern)."""
        return BlockSpec(**{**self.block_fields(), "depth": depth, **overrides}).validate()

    def layer_range(self, layers, where: str = "checkpoint.layers") -> range:
        """`layers` (an int, a range or ascending consecutive ints) as a range, checked."""
        if isinstance(layers, int) and not isinstance(layers, bool):
            layers = [layers]
        layers = list(layers)
        if not layers or any(isinstance(i, bool) or not isinstance(i, int) for i in layers):
            raise ConfigError(f"{where}: must be layer numbers, got {layers!r}")
        r = range(layers[0], layers[0] + len(layers))
        if layers != list(r):
            raise ConfigError(f"{where}: {layers!r} must be consecutive ascending layers")
        if r.start < 0 or r.stop > self.n_layers:
            raise ConfigError(
                f"{where}: {layers!r} is outside the checkpoint's layers 0..{self.n_layers - 1} "
                f"({self.folder / files.CONFIG})"
            )
        return r

    def on_device(self, dtype=None) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """(params, tables) as jax arrays of `dtype` (None: jax's default float dtype), made
        once per dtype and kept, so that a loop over window sets does not copy the weights
        again at every call. A second copy of the weights: one checkpoint at a time holds it
        (making it for another drops the previous one's, so a checkpoint series loaded at once
        holds one extra copy, not one per checkpoint)."""
        global _HOLDER
        dtype = _made(jnp.result_type(float) if dtype is None else dtype)
        out = self._device.get(dtype.name)
        if out is None:
            held = _HOLDER() if _HOLDER is not None else None
            if held is not None and held is not self:
                held._device.clear()
            _HOLDER = weakref.ref(self)
            out = tuple(
                {n: jnp.asarray(a, dtype) for n, a in m.items()} for m in (self.params, self.tables)
            )
            self._device[dtype.name] = out
        return out

    def stacked(self, layers, dtype=None) -> dict[str, jax.Array]:
        """The weights of a contiguous range of layers, stacked (L, ...), as jax arrays of
        `dtype` (None: jax's default float dtype)."""
        r = self.layer_range(layers)
        dtype = jnp.result_type(float) if dtype is None else dtype
        return {n: jnp.asarray(a[r.start : r.stop], dtype) for n, a in self.params.items()}

    def check_ids(self, ids, where: str = "inputs") -> np.ndarray:
        """Token ids (B, T) as int32 numpy, inside the vocabulary and the positions."""
        ids = np.asarray(ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ConfigError(f"{where}: token ids must be an integer array (batch, length)")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise ConfigError(
                f"{where}: token ids must lie in 0..{self.vocab - 1} (vocab_size of "
                f"{self.folder / files.CONFIG}), got {ids.min()}..{ids.max()}"
            )
        self.check_length(ids.shape[1], where)
        return ids.astype(np.int32)

    def check_length(self, length: int, where: str = "inputs.length") -> None:
        if self.max_positions and length > self.max_positions:
            raise ConfigError(
                f"{where}: {length} tokens exceed the checkpoint's {self.max_positions} "
                f"positions ({self.folder / files.CONFIG})"
            )

    def embed(self, ids_BT, dtype=None) -> jax.Array:
        """The architecture's input embeddings of token ids (B, T) -> (B, T, D)."""
        if isinstance(ids_BT, jax.core.Tracer):  # inside a program: traced with it
            dtype = jnp.result_type(float) if dtype is None else dtype
            tables = {n: jnp.asarray(a, dtype) for n, a in self.tables.items()}
            return ARCHITECTURES[self.architecture].embed(tables, ids_BT, self.fields)
        return _embed(self.architecture, self.fields, self.on_device(dtype)[1], ids_BT)

    def hidden_states(self, ids_BT, layers=None, dtype=None) -> list[jax.Array]:
        """[input of the first layer of `layers`, then each layer's output] for token ids (the
        embeddings, then layers 0.. by default), through simlab's blocks with default knobs:
        the layers below `layers` as `run` computes them (tiled attention), each of `layers`
        with the plain attention."""
        r = self.layer_range(range(self.n_layers) if layers is None else layers)
        ids = self.check_ids(ids_BT)
        x = run(self, self.embed(ids, dtype), range(0, r.start))
        out = [x]
        spec = self.block(1)
        knobs = knob_arrays({}, x.dtype)
        zeros = jnp.zeros((spec.n_heads, spec.d_head), x.dtype)
        for i in r:
            p = jax.tree.map(lambda a: a[0], self.stacked([i], x.dtype))
            x = blocks.layer_apply(spec, p, x, knobs, zeros, zeros).y
            out.append(x)
        return out

    def embedding_geometry(self, dtype=None) -> dict[str, float]:
        """The geometry of the token embedding matrix W (vocab x D, the `word` table), as
        Machina & Mercer 2024 and Mu & Viswanath 2018 measure a model's embeddings: the
        partition isotropy I(W) raw and centred, the participation ratio and IsoScore of its
        covariance, and the common share |wbar|^2 / mean |w|^2 (simlab.core.geometry;
        docs/metrics.md)."""
        dtype = jnp.result_type(float) if dtype is None else dtype
        w = jnp.asarray(self.tables["word"], dtype)
        cov = geometry.covariance(geometry.moments(w[None]))
        return {
            "partition_iso": float(geometry.partition_isotropy(w)),
            "partition_iso_centred": float(geometry.partition_isotropy(w, centred=True)),
            "participation_ratio": float(geometry.participation_ratio(cov)),
            "isoscore": float(geometry.isoscore_of(cov)),
            "common_share": float(geometry.common_share(w)),
        }

    def identity(self) -> dict:
        """What names these weights in a fingerprint: the architecture and the file hashes."""
        return {"architecture": self.architecture, "files": dict(self.hashes)}

    def at(self, layers, ids=None, where: str = "checkpoint.layers") -> Weights:
        """Consecutive layers of this checkpoint for a Lab (`Lab(..., weights=ck.at(3))`);
        ids: a fixed sample of token ids (B, T) for every seed (None: drawn per seed)."""
        r = self.layer_range(layers, where)
        return Weights(self, r, None if ids is None else self.check_ids(ids, "checkpoint.ids"))


# the one Checkpoint whose weights Checkpoint.on_device keeps as jax arrays
_HOLDER: weakref.ref | None = None


def _made(dtype) -> np.dtype:
    """The dtype jax makes when asked for `dtype` now (float64 is float32 without x64): the key
    of the caches above, so that a float64 request made without x64 is not served later,
    under x64, by its float32 arrays."""
    return jax.dtypes.canonicalize_dtype(dtype)


INPUT_VOCAB_DEFAULT = next(f.default for f in dataclasses.fields(InputSpec) if f.name == "vocab")
# BlockSpec fields a study may set on trained layers; every other field is the checkpoint's
STUDY_FIELDS = ("pattern", "depth", "pattern_head", "scaled_head")


def check_trained(own: Mapping, given: Mapping, where: str, origin) -> None:
    """The trained-weights rule, the one place it is coded: on a checkpoint's layers a block
    field other than STUDY_FIELDS must equal the checkpoint's own (`own`: the fields its
    config.json states, every other BlockSpec field at its default: the trained layers have no
    QK-norm, centring or tied weights). `given`: field -> value (a [block] table, or a spec's
    fields); a difference is refused naming the field and `origin` (the config file)."""
    full = dataclasses.asdict(BlockSpec(**own))
    for k, v in given.items():
        if k in STUDY_FIELDS or k not in full or v == full[k]:
            continue
        raise ConfigError(
            f"{where}.{k}: {v!r} differs from the checkpoint's {full[k]!r} ({origin}); on "
            f"trained weights [block] sets only {', '.join(STUDY_FIELDS)}"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Weights:
    """Layers `layers` of a checkpoint, run by a Lab instead of drawn weights
    (simlab.core.lab.Lab(weights=...)): every seed sees these weights; only the inputs and the
    random directions vary. Inputs of kind "tokens": the checkpoint's embeddings of token ids
    (`ids` if given, else drawn per seed as simlab.core.inputs.token_ids draws them) passed
    through the checkpoint's layers below the first one (`hidden`)."""

    checkpoint: Checkpoint
    layers: range
    ids: np.ndarray | None = None
    source: object = None  # the resolved [checkpoint] table these came from (None: given)
    # hidden(ids) of the fixed ids per dtype, once (fixed_hidden)
    _fixed: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    def check(self, block, inputs) -> None:
        """Refuse a block or input spec these weights cannot run, naming the field."""
        ck = self.checkpoint
        cfg = ck.folder / files.CONFIG
        check_trained(ck.block_fields(), dataclasses.asdict(block), "block", cfg)
        if block.depth != len(self.layers):
            raise ConfigError(
                f"block.depth: {block.depth} differs from the {len(self.layers)} checkpoint "
                f"layers {self.layers.start}..{self.layers.stop - 1}"
            )
        ck.check_length(inputs.length)
        kind = INPUTS[inputs.kind]
        if kind.check is not None:
            kind.check(inputs, self)

    def check_ids_shape(self, inputs) -> None:
        """The fixed ids (if any) have the shape (inputs.batch, inputs.length)."""
        if self.ids is not None and self.ids.shape != (inputs.batch, inputs.length):
            raise ConfigError(
                f"checkpoint.ids: shape {self.ids.shape} differs from (inputs.batch, "
                f"inputs.length) = ({inputs.batch}, {inputs.length})"
            )

    def check_vocab(self, inputs) -> None:
        """Drawn ids (no fixed ones) stay inside the checkpoint's vocabulary."""
        ck = self.checkpoint
        if self.ids is None and inputs.vocab > ck.vocab:
            default = " (also InputSpec's default, when [inputs] gives none)" * (
                inputs.vocab == INPUT_VOCAB_DEFAULT
            )
            raise ConfigError(
                f"inputs.vocab: {inputs.vocab}{default} exceeds the checkpoint's vocab_size "
                f"{ck.vocab} ({ck.folder / files.CONFIG}); set inputs.vocab to at most {ck.vocab}"
            )

    def params(self, dtype=None) -> dict[str, jax.Array]:
        """The layers' weights stacked (L, ...) in the lab's layout."""
        return self.checkpoint.stacked(self.layers, dtype)

    def hidden(self, ids_BT, dtype=None) -> jax.Array:
        """What the first of `layers` sees in the model for token ids: the embeddings through
        the layers below it (default knobs)."""
        x = self.checkpoint.embed(ids_BT, dtype)
        return run(self.checkpoint, x, range(0, self.layers.start))

    def fixed_hidden(self, dtype) -> np.ndarray:
        """hidden(ids) of the fixed ids, evaluated now (never traced: XLA would constant-fold
        the lower layers, a minute per layer at BERT's size) and kept per dtype, so that every
        Lab on these Weights (a softmax one and a clamped one, say) shares one evaluation."""
        key = _made(dtype).name
        if key not in self._fixed:
            with jax.ensure_compile_time_eval():
                self._fixed[key] = np.asarray(self.hidden(jnp.asarray(self.ids), dtype))
        return self._fixed[key]

    def identity(self) -> dict:
        """The checkpoint's identity (file hashes), the layers and the fixed ids (a hash)."""
        out = {**self.checkpoint.identity(), "layers": [self.layers.start, self.layers.stop - 1]}
        if self.ids is not None:
            raw = np.ascontiguousarray(self.ids, np.int64).tobytes()
            out["ids"] = hashlib.sha256(raw).hexdigest()
        return out


def run(ckpt: Checkpoint, x_BTD, layers) -> jax.Array:
    """x through `layers` of the checkpoint with default knobs (softmax attention). One compiled
    program per block spec and shapes (`_stack`): the weights are its arguments, never
    constants, so a new checkpoint or window set of the same sizes reuses it, and run eagerly
    (fixed ids, simlab.checkpoints.inputs) the layers cost one call, not one dispatch per op."""
    if not len(layers):
        return x_BTD
    r = ckpt.layer_range(layers)
    spec = ckpt.block(len(r))
    if isinstance(x_BTD, jax.core.Tracer):  # inside a program: traced with it, as constants
        return _stack_fn(spec, 0, ckpt.stacked(r, x_BTD.dtype), x_BTD)
    return _stack(spec, r.start, ckpt.on_device(x_BTD.dtype)[0], x_BTD)


def _embed(architecture: str, fields: Mapping, tables, ids_BT) -> jax.Array:
    """The architecture's embeddings, one compiled program per architecture, settings and
    shapes (the tables its arguments)."""
    return _embed_jit(architecture, tuple(sorted(fields.items())), tables, jnp.asarray(ids_BT))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _embed_jit(architecture: str, fields: tuple, tables, ids_BT) -> jax.Array:
    return ARCHITECTURES[architecture].embed(tables, ids_BT, dict(fields))


def _stack_fn(spec: BlockSpec, start: int, params_L, x_BTD) -> jax.Array:
    """x through layers start .. start + spec.depth - 1 of the stacked `params_L` (the tiled
    attention, simlab.core.tiled, tiles from the sizes)."""
    params_L = jax.tree.map(lambda a: a[start : start + spec.depth], params_L)
    z = jnp.zeros((spec.depth, spec.n_heads, spec.d_head), x_BTD.dtype)
    knobs = knob_arrays({}, x_BTD.dtype)
    b, t = x_BTD.shape[:2]
    tiling = choose_tiling(b, t, spec.n_heads, t)
    y, _ = blocks.stack_apply(
        spec, params_L, x_BTD, knobs, z, z, observe=lambda l: (), tiling=tiling
    )
    return y


_stack = jax.jit(_stack_fn, static_argnums=(0, 1))


def _architecture(c: Config):
    name = c.cfg.get("model_type")
    if name is None:
        c.fail(
            "model_type",
            f"missing (config.json names no architecture); supported: {', '.join(ARCHITECTURES)}",
        )
    if name not in ARCHITECTURES:
        c.fail("model_type", f"{name!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def _check_rotary(fields: dict, c: Config) -> None:
    """Refuse, at load and naming config.json's fields, a head dim whose rotated part is odd
    (rotary embeddings turn pairs of dims; BlockSpec would refuse it later as block.rotary_pct,
    a field the user never set)."""
    k, pct = fields["d_model"] // fields["n_heads"], fields.get("rotary_pct", 0.0)
    if int(k * pct) % 2:
        c.fail(
            "head_dim" if "head_dim" in c.cfg else "num_attention_heads",
            f"the head dim hidden_size {fields['d_model']} / num_attention_heads "
            f"{fields['n_heads']} = {k} is odd; its rotary embeddings turn {int(k * pct)} dims "
            "in pairs, which must be even: simlab cannot run this checkpoint",
        )


def load(path, where: str = "checkpoint.path") -> Checkpoint:
    """Read a checkpoint folder (simlab.checkpoints.files.locate) into the lab's layout.
    Each file is read once (simlab.checkpoints.files.read). Refused in one line naming the
    field and the file: an architecture not in ARCHITECTURES, a config value simlab does not
    compute, a missing tensor, a shape mismatch, a NaN or Inf in a tensor. `path` may also
    name an installed model (simlab.checkpoints.models.MODELS) or a .gguf file
    (simlab.checkpoints.gguf_file)."""
    path = models.path_of(path, where)
    if gguf_file.is_gguf(path):
        return Checkpoint(**gguf_file.parts(path, where))
    folder = files.locate(path, where)
    cfg_file = folder / files.CONFIG
    config, tensors, origin, hashes = files.read(folder)  # every file once, hashed as read
    c = Config(config, str(cfg_file))
    arch = _architecture(c)
    arch_name = arch.name
    fields = arch.spec(c)
    _check_rotary(fields, c)
    n_layers = arch.n_layers(c)
    prefix = next((p for p in arch.prefixes if p + arch.probe in tensors), None)
    if prefix is None:
        raise ConfigError(
            f"{folder / files.weight_files(folder)[0].name}: tensor {arch.probe!r} is missing "
            f"(with any prefix of {', '.join(repr(p) for p in arch.prefixes)}): not a "
            f"{arch_name} checkpoint"
        )
    get = Tensors(tensors, origin, prefix, folder)
    layers = [arch.layer(get, i, c, fields) for i in range(n_layers)]
    params = {n: np.stack([lay[n] for lay in layers]) for n in layers[0]}
    return Checkpoint(
        folder=folder,
        architecture=arch_name,
        fields=fields,
        params=params,
        tables=arch.tables(get, c, fields),
        hashes=hashes,
        n_layers=n_layers,
        vocab=arch.vocab(c),
        max_positions=arch.max_positions(c),
        trained_positions=_trained_positions(c.cfg.get("max_position_embeddings")),
    )


def _trained_positions(n) -> int:
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def step_of(name: str) -> int:
    """The training step in a checkpoint folder's name: its last number (step143000 -> 143000;
    -1 when there is none)."""
    m = re.findall(r"\d+", name)
    return int(m[-1]) if m else -1


def load_series(folder, where: str = "checkpoints") -> list[tuple[str, Checkpoint]]:
    """Every checkpoint folder directly inside `folder` (e.g. Pythia's step revisions saved as
    step1000/, step2000/, ...), as (name, Checkpoint) ordered by step_of(name)."""
    root = pathlib.Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{where}: {str(root)!r} is not a directory")
    subs = [p for p in root.iterdir() if p.is_dir() and (p / files.CONFIG).is_file()]
    if not subs:
        raise ConfigError(f"{where}: no checkpoint folders (with {files.CONFIG}) in {str(root)!r}")
    subs.sort(key=lambda p: (step_of(p.name), p.name))
    return [(p.name, load(p, f"{where}/{p.name}")) for p in subs]
