"""The input kind "text" (simlab.checkpoints.inputs): windows of real text through the tiny BERT
fixture's own tokenizer (tests/fixtures/make_tokenizer.py), checked against the `tokenizers`
package's own encoding of the corpus; reproducible by seed; BERT's [CLS] ... [SEP] at both
ends (nothing added by a tokenizer without a template); a corpus too short refused in one line
before anything runs; a sweep from a TOML config equal to the Lab run by hand; the corpus not
compiled into the program."""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simlab
from simlab.checkpoints import corpus, inputs, load, models
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import InputSpec
from simlab.engine.tomlio import read_config_toml
from simlab.errors import ConfigError

tokenizers = pytest.importorskip("tokenizers")

ROOT = pathlib.Path(__file__).resolve().parents[2]
BERT = ROOT / "tests" / "fixtures" / "checkpoints" / "bert"
WORDS = (
    "the value of a knob is the scale of the queries and the keys , and the drift is a "
    "vector ( one per seed ) that every token shares : it is not a model of text ."
)


@pytest.fixture(scope="module")
def ck():
    return load(BERT)


def write_corpus(path: pathlib.Path, repeats: int) -> str:
    path.write_text(" ".join([WORDS] * repeats))
    return str(path)


def own_encoding(text: str) -> tuple[list[int], int, int]:
    """The corpus's ids and [CLS] / [SEP] as the tokenizers package gives them, read here."""
    tok = tokenizers.Tokenizer.from_file(str(BERT / "tokenizer.json"))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    return tok.encode(text, add_special_tokens=False).ids, cls, sep


def spec(path, batch=6, length=10) -> InputSpec:
    return InputSpec(kind="text", batch=batch, length=length, corpus=str(path))


def test_windows_are_the_tokenizers_encoding_between_cls_and_sep(ck, tmp_path):
    path = write_corpus(tmp_path / "c.txt", 4)
    ids, cls, sep = own_encoding(pathlib.Path(path).read_text())
    assert cls == 2 and sep == 3 and len(set(ids)) > 10  # the words are in the vocabulary
    w = np.asarray(inputs.text_ids(spec(path), ck.at([1]), jax.random.PRNGKey(0)))
    assert w.shape == (6, 10) and np.all(w[:, 0] == cls) and np.all(w[:, -1] == sep)
    starts = []
    for row in w[:, 1:-1].tolist():
        hits = [s for s in range(len(ids) - 7) if ids[s : s + 8] == row]
        assert hits, row  # 8 consecutive ids of the text
        starts.append(hits[0])
    assert len(set(starts)) > 1  # windows at different offsets


def test_windows_are_reproducible_by_seed_and_differ_between_seeds(ck, tmp_path):
    s, w = spec(write_corpus(tmp_path / "c.txt", 20)), ck.at([1])
    key = jax.random.fold_in(jax.random.PRNGKey(0), 3)
    a = np.asarray(inputs.text_ids(s, w, key))
    b = np.asarray(jax.jit(lambda k: inputs.text_ids(s, w, k))(key))
    np.testing.assert_array_equal(a, b)  # eager and compiled: the seed alone decides
    c = np.asarray(inputs.text_ids(s, w, jax.random.fold_in(jax.random.PRNGKey(0), 4)))
    assert not np.array_equal(a, c)
    # the Lab's inputs of a seed are the checkpoint's layer-0 output on exactly these windows
    lab = Lab(ck.block(1), s, ["out_cos"], weights=w)
    key = jax.random.PRNGKey(7)
    x = jax.jit(lab.seed_state)(key)["comps"]["x"]
    ids = inputs.text_ids(s, w, jax.random.fold_in(key, 1))  # the seed's input key
    np.testing.assert_allclose(x, ck.hidden_states(np.asarray(ids), [1])[0], rtol=1e-5, atol=1e-6)


def test_a_tokenizer_without_template_adds_nothing(ck, tmp_path):
    raw = json.loads(ck.tokenizer_text())
    raw["post_processor"] = None
    tok = models.tokenizer_from_str(json.dumps(raw))
    assert models.template(tok) == ((), ())
    assert models.template(models.tokenizer_from_str(ck.tokenizer_text())) == ((2,), (3,))
    # with no template the window is all text
    ids = np.arange(50, dtype=np.int32)
    got = models.windows(ids, (), (), np.array([0, 7]), 5)
    np.testing.assert_array_equal(got, [[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])


def test_a_corpus_too_short_is_refused_in_one_line_before_anything_runs(ck, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("the value of a knob")  # 5 tokens: fewer than a window of 8
    with pytest.raises(ConfigError) as e:
        Lab(ck.block(1), spec(path), ["out_cos"], weights=ck.at([1]))
    msg = str(e.value)
    assert msg.startswith("inputs.corpus: ") and str(path) in msg and "\n" not in msg
    assert "5 tokens" in msg and "window of 8" in msg
    # from a config: refused before the output folder exists
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="inputs.corpus: "):
        simlab.run_sweep(config(path), out=out, quiet=True)
    assert not out.exists()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "w.bin").write_bytes(b"\xff\xfe\x00")  # not text: left out
    for bad, why in (("absent.txt", "neither 'stdlib' nor"), ("empty", "holds no text")):
        with pytest.raises(ConfigError, match=f"inputs.corpus: .*{bad}.* {why}"):
            Lab(ck.block(1), spec(tmp_path / bad), ["out_cos"], weights=ck.at([1]))


def config(path, seeds=2) -> dict:
    return {
        "checkpoint": {"path": str(BERT), "layer": 1},
        "inputs": {"kind": "text", "batch": 3, "length": 9, "corpus": str(path)},
        "axes": [{"name": "q_scale", "values": [0.5, 1.0, 4.0]}],
        "sweep": {"seeds": seeds, "metrics": ["out_cos", "attn_entropy"]},
    }


@pytest.mark.slow
def test_a_sweep_from_toml_equals_the_lab_by_hand(ck, tmp_path):
    path = write_corpus(tmp_path / "c.txt", 20)
    toml = tmp_path / "text.toml"
    toml.write_text(
        f'[checkpoint]\npath = "{BERT}"\nlayer = 1\n\n'
        '[inputs]\nkind = "text"\nbatch = 3\nlength = 9\ncorpus = "c.txt"\n\n'
        '[[axes]]\nname = "q_scale"\nvalues = [0.5, 1.0, 4.0]\n\n'
        '[sweep]\nseeds = 2\nmetrics = ["out_cos", "attn_entropy"]\n'
    )  # corpus relative to the config file (read_config_toml: as `simlab sweep` reads it)
    res = simlab.run_sweep(read_config_toml(toml), out=None, quiet=True)
    assert res.meta["config"]["inputs"]["corpus"] == path
    lab = Lab(ck.block(1), InputSpec(kind="text", batch=3, length=9, corpus=path),
              ["out_cos", "attn_entropy"], weights=ck.at([1]))  # fmt: skip
    seed_state, point = jax.jit(lab.seed_state), jax.jit(lab.point)
    for s in range(2):
        state = seed_state(jax.random.fold_in(jax.random.PRNGKey(0), s))
        for i, q in enumerate((0.5, 1.0, 4.0)):
            out = point(state, knob_arrays({"q_scale": q}, jnp.float32))
            for m in ("out_cos", "attn_entropy"):
                np.testing.assert_allclose(res[m][i, s], out[m], rtol=2e-5, atol=1e-6)
    assert np.ptp(np.asarray(res["out_cos"]), axis=1).max() > 0  # seeds draw other windows


def test_the_corpus_is_data_not_a_constant_of_the_program(ck, tmp_path):
    """The lowered seed_state is the same size for a corpus 50 times longer: the corpus stays on
    the host, only the window ids (B, T) enter the program (no constant grows with it)."""
    sizes, consts = [], []
    for n in (2, 100):
        s = spec(write_corpus(tmp_path / f"c{n}.txt", n), batch=4, length=12)
        lab = Lab(ck.block(1), s, ["out_cos"], weights=ck.at([1]))
        assert len(corpus.token_ids(ck.tokenizer_text(), s.corpus)) > 20 * n
        hlo = jax.jit(lab.seed_state).lower(jax.random.PRNGKey(0)).as_text()
        sizes.append(len(hlo))
        consts.append(sum(line.count("constant") for line in hlo.splitlines()))
    assert consts[0] == consts[1]
    assert abs(sizes[0] - sizes[1]) < 64, sizes  # the callback's handle may differ in digits


def test_a_checkpoint_without_tokenizer_or_with_fixed_ids_is_refused(ck, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        (bare / f).write_bytes((BERT / f).read_bytes())
    s = spec(write_corpus(tmp_path / "c.txt", 4))
    with pytest.raises(ConfigError, match=r"inputs.kind: 'text' needs .*bare/tokenizer.json"):
        Lab(ck.block(1), s, ["out_cos"], weights=load(bare).at([1]))
    with pytest.raises(ConfigError, match="checkpoint.ids: fixed ids and inputs.kind 'text'"):
        Lab(ck.block(1), s, ["out_cos"], weights=ck.at([1], np.zeros((6, 10), np.int64)))


def test_fixed_ids_are_data_not_constants_of_the_program(ck):
    """The kind "tokens" on fixed ids (checkpoint.ids): their lower layers are computed once and
    enter the program as data, so it does not grow with the ids (32 times as many here), and
    the inputs are the checkpoint's own hidden states of those ids."""
    sizes = []
    for b in (2, 64):
        ids = np.random.default_rng(b).integers(0, 100, (b, 12))
        s = InputSpec(kind="tokens", batch=b, length=12, vocab=100)
        lab = Lab(ck.block(1), s, ["out_cos"], weights=ck.at([1], ids))
        lowered = jax.jit(lab.seed_state).lower(jax.random.PRNGKey(0))
        sizes.append(len(lowered.as_text()))
        if b == 2:
            x = lowered.compile()(jax.random.PRNGKey(0))["comps"]["x"]
            want = ck.at([1], ids).hidden(jnp.asarray(ids), jnp.float32)
            np.testing.assert_array_equal(x, want)
    # only the shapes' digits differ (the ids as a constant: +95,000 characters here)
    assert abs(sizes[0] - sizes[1]) < 0.01 * sizes[0], sizes


@pytest.mark.slow
def test_the_stdlib_corpus_is_the_training_studys_text(ck):
    """inputs.corpus = "stdlib": the standard library's documents (the training study's reading,
    simlab.studies.train_dynamics.text) joined by a blank line, and the windows are its
    encoding by the tokenizers package."""
    from simlab.studies.train_dynamics import text as train_text

    docs, _ = train_text.documents()
    want = "\n\n".join(d.decode("utf-8", "replace") for _, d in docs)
    assert corpus.text("stdlib") == want
    ids, cls, sep = own_encoding(want)
    s = InputSpec(kind="text", batch=4, length=12)  # the default corpus
    w = np.asarray(inputs.text_ids(s, ck.at([1]), jax.random.PRNGKey(1)))
    assert np.all(w[:, 0] == cls) and np.all(w[:, -1] == sep)
    ids = np.asarray(ids)
    for row in w[:, 1:-1]:
        hit = np.flatnonzero(np.all(np.lib.stride_tricks.sliding_window_view(ids, 10) == row, 1))
        assert len(hit), row


@pytest.mark.model
@pytest.mark.skipif(
    not models.installed("all-minilm-l6-v2"), reason="simlab models install all-minilm-l6-v2"
)
def test_the_real_models_windows_and_inputs():
    """MiniLM: the template is its tokenizer's [CLS] ... [SEP] (models.special_ids), and the
    text kind's inputs of layer 3 are the checkpoint's hidden states of the windows."""
    folder = models.find("all-minilm-l6-v2")
    mini = load(folder)
    tok = models.tokenizer(folder)
    cls, sep = models.special_ids(tok)
    assert models.template(tok) == ((cls,), (sep,))
    s = InputSpec(kind="text", batch=2, length=16)
    lab = Lab(mini.block(1), s, ["out_cos"], weights=mini.at([3]))
    key = jax.random.PRNGKey(0)
    x = jax.jit(lab.seed_state)(key)["comps"]["x"]
    ids = np.asarray(inputs.text_ids(s, mini.at([3]), jax.random.fold_in(key, 1)))
    assert np.all(ids[:, 0] == cls) and np.all(ids[:, -1] == sep)
    np.testing.assert_allclose(x, mini.hidden_states(ids, [3])[0], rtol=1e-4, atol=1e-5)


def test_the_text_enters_the_fingerprint_not_where_it_lies(tmp_path):
    """A resolved config records the sha256 of the corpus's content and the tokenizer.json
    (inputs.text_sha256): the same text in another folder is the same sweep (the path leaves
    the fingerprint, as a checkpoint's does); changed text is refused when the recorded config
    is run again, naming the field, as changed weights are; and the changed text is another
    fingerprint (a directory holding the old one refuses it)."""
    from simlab.engine.config import fingerprint, load_config

    a = write_corpus(tmp_path / "a.txt", 20)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    b = write_corpus(moved / "a.txt", 20)
    ca, cb = load_config(config(a)), load_config(config(b))
    assert ca.inputs.text_sha256 == cb.inputs.text_sha256 is not None
    assert fingerprint(ca.to_dict()) == fingerprint(cb.to_dict())
    stored = ca.to_dict()
    pathlib.Path(a).write_text(pathlib.Path(a).read_text() + " the end")
    with pytest.raises(ConfigError, match=r"^inputs.text_sha256: the corpus .* \(changed since\)$"):
        load_config(stored)
    changed = load_config(config(a))
    assert changed.inputs.text_sha256 != ca.inputs.text_sha256
    assert fingerprint(changed.to_dict()) != fingerprint(ca.to_dict())


def test_two_labs_on_one_weights_evaluate_the_lower_layers_once(ck, monkeypatch):
    """Weights.fixed_hidden: a softmax Lab and a clamped Lab on one Weights (the counterfactual
    sweep's pair) evaluate the lower layers once, and each seed state's input is exactly those
    hidden states; eagerly the input is the array itself (no host callback to compile)."""
    from simlab.checkpoints import checkpoint

    calls = []
    hidden = checkpoint.Weights.hidden
    monkeypatch.setattr(
        checkpoint.Weights, "hidden", lambda self, *a: calls.append(1) or hidden(self, *a)
    )
    ids = np.random.default_rng(3).integers(0, 100, (3, 12))
    s = InputSpec(kind="tokens", batch=3, length=12, vocab=100)
    w = ck.at([1], ids)
    labs = [Lab(ck.block(1, pattern=p), s, ["out_cos"], weights=w) for p in ("softmax", "uniform")]
    xs = [lab.seed_state(jax.random.PRNGKey(k))["comps"]["x"] for k, lab in enumerate(labs)]
    assert len(calls) == 1
    want = ck.hidden_states(ids, layers=[1])[0]
    for x in xs:
        np.testing.assert_array_equal(x, want)


def test_lower_layers_run_eagerly_equal_them_traced_and_compile_once(ck):
    """simlab.checkpoints.checkpoint.run: eagerly one compiled program with the weights as its
    arguments (reused for new ids and a new load of the same sizes), traced the same layers as
    constants of the caller's program; both equal to float32 rounding, and to float64."""
    from simlab.checkpoints import checkpoint

    ids = [np.random.default_rng(i).integers(0, 100, (2, 12)) for i in range(3)]
    w = ck.at([1])
    eager = [np.asarray(w.hidden(jnp.asarray(i))) for i in ids]
    n = checkpoint._stack._cache_size()
    w2 = load(BERT).at([1])  # a new load: new arrays, the same program
    again = np.asarray(w2.hidden(jnp.asarray(ids[0])))
    assert checkpoint._stack._cache_size() == n
    np.testing.assert_array_equal(again, eager[0])
    traced = jax.jit(lambda i: w.hidden(i))
    for i, e in zip(ids, eager):
        np.testing.assert_allclose(traced(jnp.asarray(i)), e, rtol=1e-5, atol=1e-5)
    with jax.enable_x64(True):
        e64 = w.hidden(jnp.asarray(ids[0]), jnp.float64)
    assert e64.dtype == np.float64
    np.testing.assert_allclose(eager[0], e64, rtol=1e-4, atol=1e-5)


def test_a_float64_request_without_x64_does_not_stay_float32_under_x64(ck):
    """The weights kept on device and the fixed ids' hidden states are keyed by the dtype jax
    really makes: asked for float64 without x64 (float32 then), a later float64 request under
    x64 computes in float64, the Lab's inputs included."""
    ids = np.random.default_rng(1).integers(0, 100, (2, 12))
    w = ck.at([1], ids)
    assert w.hidden(jnp.asarray(ids), jnp.float64).dtype == np.float32  # x64 off: float32
    assert w.fixed_hidden(jnp.float64).dtype == np.float32
    with jax.enable_x64(True):
        assert w.hidden(jnp.asarray(ids), jnp.float64).dtype == np.float64
        assert w.fixed_hidden(jnp.float64).dtype == np.float64
        s = InputSpec(kind="tokens", batch=2, length=12, vocab=100)
        x = Lab(ck.block(1), s, ["out_cos"], weights=w).seed_state(jax.random.PRNGKey(0))
        assert x["comps"]["x"].dtype == np.float64


@pytest.mark.parametrize("name", ["bert", "gpt2", "gpt_neox", "llama", "qwen2"])
def test_lower_layers_equal_the_plain_attention_oracle(name):
    """simlab.checkpoints.checkpoint.run (tiled attention, simlab.core.tiled) against the plain
    attention (the full weights, simlab.core.block's oracle path) through every layer of each
    architecture's fixture, causal and rotary ones included: float32 rounding apart."""
    from simlab.checkpoints import checkpoint
    from simlab.core import block
    from simlab.core.knobs import knob_arrays

    c = load(ROOT / "tests" / "fixtures" / "checkpoints" / name)
    ids = np.random.default_rng(2).integers(0, min(c.vocab, 100), (2, 12))
    x = c.embed(ids)
    got = checkpoint.run(c, x, range(c.n_layers))
    spec = c.block(c.n_layers)
    z = jnp.zeros((c.n_layers, spec.n_heads, spec.d_head))
    want, _ = block.stack_apply(
        spec, c.stacked(range(c.n_layers)), x, knob_arrays({}), z, z, observe=lambda l: ()
    )
    scale = float(jnp.max(jnp.abs(want)))  # float32 rounding grows with the values (~20 here)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    assert float(jnp.max(jnp.abs(got - x))) > 0.1  # the layers really ran


def test_one_checkpoint_at_a_time_keeps_its_weights_on_device():
    """Checkpoint.on_device keeps a second copy of the weights for one checkpoint only: making
    it for another drops the first one's (a series loaded at once holds one extra copy), and
    the first one's embeddings are the same when it is made again."""
    a, b = load(BERT), load(BERT)
    ids = np.random.default_rng(0).integers(0, 100, (2, 12))
    first = np.asarray(a.embed(ids))
    assert set(a._device) == {"float32"} and not b._device
    np.testing.assert_array_equal(np.asarray(b.embed(ids)), first)
    assert not a._device and set(b._device) == {"float32"}
    np.testing.assert_array_equal(np.asarray(a.embed(ids)), first)
    assert set(a._device) == {"float32"} and not b._device
