"""The massive activation, found and removed (simlab.studies.massive), on the tiny random Llama
checkpoint of tests/fixtures/checkpoints/llama with a massive activation planted in the
embedding of its bos token (id 1, at position 0 of every sequence): `find` against a float64
numpy reading of the hidden states, `remove` against numpy, and the counterfactual Lab (the
intervention on the input of layer 1, its weights unchanged) against numpy measures of the
intervened input and the layer run on it."""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np
import pytest

from simlab.checkpoints import load
from simlab.core import block
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import InputSpec
from simlab.errors import ConfigError
from simlab.studies import massive

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "checkpoints" / "llama"
BOS, DIMS = 1, (17, 5)  # |h| of dim 17 planted above dim 5's
B, T = 3, 8


@pytest.fixture(scope="module")
def planted():
    """(checkpoint with the massive activation planted, token ids (B, T) starting with bos)."""
    ck = load(FIXTURE)
    word = np.array(ck.tables["word"])
    word[BOS, DIMS[0]], word[BOS, DIMS[1]] = -4000.0, 2500.0  # the table's std is ~0.3
    ck = dataclasses.replace(ck, tables={**ck.tables, "word": word})
    ids = np.random.default_rng(0).integers(3, ck.vocab, (B, T))
    ids[:, 0] = BOS
    return ck, ids


def np_remove(x, position, dims):
    x = np.array(x, np.float64)
    others = [t for t in range(x.shape[1]) if t != position]
    for d in dims:
        x[:, position, d] = x[:, others, d].mean(axis=1)
    return x


def np_cos(x):
    u = x.reshape(-1, x.shape[-1])
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    g = u @ u.T
    n = len(u)
    return (g.sum() - np.trace(g)) / (n * (n - 1))


def test_find_reports_the_planted_activation(planted):
    """Per hidden state (embeddings, layer 0, layer 1): the ratio max |h| / median |h|, the
    position and the dims equal a float64 numpy reading; the planted token, position 0, and
    its two dims (by magnitude) are found at every layer, from the embeddings on."""
    ck, ids = planted
    hidden = ck.hidden_states(ids)
    found = massive.find(hidden)
    assert len(found) == ck.n_layers + 1
    for m, h in zip(found, hidden):
        a = np.abs(np.asarray(h, np.float64))
        assert m.ratio == pytest.approx(a.max() / np.median(a), rel=1e-12)
        assert (m.position, m.dims) == (0, DIMS) and a[m.seq, 0, DIMS[0]] == a.max()
        assert m.ratio > 100
    assert massive.appears(found) == 0


def test_find_and_appears_on_a_synthetic_stack():
    """A massive coordinate that appears at the third hidden state (position 3, dims 2 and 6
    above 100 x median, dim 0 below it) is found there, not before."""
    rng = np.random.default_rng(3)
    hidden = [rng.standard_normal((2, 5, 8)) for _ in range(4)]
    for h in hidden[2:]:
        h[1, 3, 6], h[1, 3, 2], h[1, 3, 0] = 900.0, -500.0, 20.0
    found = massive.find(hidden)
    assert [m.ratio >= 100 for m in found] == [False, False, True, True]
    assert massive.appears(found) == 2 and massive.appears(found[:2]) is None
    assert (found[2].seq, found[2].position, found[2].dims) == (1, 3, (6, 2))
    med = np.median(np.abs(hidden[2]))
    assert found[2].ratio == pytest.approx(900.0 / med, rel=1e-12)


def test_remove_vs_numpy():
    x = np.random.default_rng(1).standard_normal((2, 6, 5))
    got = np.asarray(massive.remove(jax.numpy.asarray(x), 2, (4, 0)), np.float64)
    np.testing.assert_allclose(got, np_remove(x, 2, (4, 0)), rtol=1e-6, atol=1e-7)


def test_the_counterfactual_removes_it_at_the_layer_input(planted):
    """A Lab on layer 1 with the activation removed from its input: its input cosine and
    position-0 norm ratio equal numpy's on the intervened input (and differ from the intact
    Lab's), its output cosine is layer 1 (weights unchanged) run on that input; the weights
    and the intact Lab are untouched; the identity names the intervention."""
    ck, ids = planted
    found = massive.find(ck.hidden_states(ids))[1]  # at the input of layer 1
    intact = ck.at([1], ids)
    cut = massive.removed(intact, found)
    inputs = InputSpec(kind="tokens", batch=B, length=T, vocab=ck.vocab)
    names = ("input_cos", "input_pos0_norm_ratio", "out_cos")
    kn = knob_arrays({})
    got = {}
    for tag, w in (("intact", intact), ("cut", cut)):
        lab = Lab(ck.block(1), inputs, names, weights=w)
        got[tag] = jax.jit(lab.point)(lab.seed_state(jax.random.PRNGKey(0)), kn)
    x = np.asarray(ck.hidden_states(ids, layers=[1])[0], np.float64)
    x_cut = np_remove(x, 0, DIMS)
    norms = np.linalg.norm(x_cut, axis=-1)
    ratio = np.mean(norms[:, 0] / np.median(norms[:, 1:], axis=1))
    np.testing.assert_allclose(float(got["cut"]["input_cos"]), np_cos(x_cut), atol=2e-6)
    np.testing.assert_allclose(float(got["intact"]["input_cos"]), np_cos(x), atol=2e-6)
    np.testing.assert_allclose(float(got["cut"]["input_pos0_norm_ratio"]), ratio, rtol=1e-5)
    assert float(got["intact"]["input_pos0_norm_ratio"]) > 10 * ratio
    spec = ck.block(1)
    p = jax.tree.map(lambda a: a[0], ck.stacked([1]))
    zeros = np.zeros((spec.n_heads, spec.d_head), np.float32)
    y = block.layer_apply(spec, p, np.float32(x_cut), kn, zeros, zeros).y
    np.testing.assert_allclose(float(got["cut"]["out_cos"]), np_cos(np.asarray(y)), atol=2e-6)
    for n, a in cut.params().items():
        assert np.array_equal(np.asarray(a), np.asarray(intact.params()[n]))
    assert cut.identity()["massive_removed"] == {"position": 0, "dims": list(DIMS)}
    assert cut.identity()["files"] == intact.identity()["files"]


def test_a_bad_intervention_is_refused(planted):
    ck, ids = planted
    inputs = InputSpec(kind="tokens", batch=B, length=T, vocab=ck.vocab)
    bad = massive.Removed(ck, range(1, 2), ids, position=T, dims=(3,))
    with pytest.raises(ConfigError, match=r"massive\.position: 8 is outside"):
        Lab(ck.block(1), inputs, ("input_cos",), weights=bad)
    bad = massive.Removed(ck, range(1, 2), ids, position=0, dims=(48,))
    with pytest.raises(ConfigError, match=r"massive\.dims: \[48\]"):
        Lab(ck.block(1), inputs, ("input_cos",), weights=bad)
