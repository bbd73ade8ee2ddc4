"""The corpora of the training study (simlab.studies.train_dynamics.corpus and its task
modules): each has the intended statistics, checked directly on samples or against an
independent computation. Nothing here asserts what a trained model does."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest

from simlab.studies.train_dynamics import corpus, induction, markov, recall, text, zipf

SYNTHETIC = [n for n, (task, _) in corpus.CORPORA.items() if task != "text"]


def _spec(name, **kw):
    return corpus.CorpusSpec(name, **{"vocab": 64, "seed": 3, **kw})


# ------------------------------------------------------------------ unigram laws
@pytest.mark.parametrize("name", [n for n in SYNTHETIC if corpus.CORPORA[n][1] == "zipf"])
@pytest.mark.parametrize("s", [0.8, 1.1, 1.5])
def test_zipf_exponent_fitted_on_a_sample(name, s):
    spec = _spec(name, vocab=256, zipf_s=s, pairs=16, period_min=8, period_max=24)
    ids = corpus.sample(spec, 2000, 65, np.random.default_rng(0))
    assert abs(corpus.fit_zipf_exponent(ids, 256) - s) < 0.1
    # independent estimate: least squares of log frequency on log rank (ranks seen >= 20 times)
    counts = np.bincount(ids.ravel(), minlength=256)
    keep = counts >= 20
    slope = np.polyfit(np.log(np.arange(1, 257)[keep]), np.log(counts[keep]), 1)[0]
    assert abs(-slope - s) < 0.1


@pytest.mark.parametrize("name", [n for n in SYNTHETIC if corpus.CORPORA[n][1] == "uniform"])
def test_uniform_corpora_have_a_uniform_unigram(name):
    spec = _spec(name, vocab=256, pairs=16, period_min=8, period_max=24)
    ids = corpus.sample(spec, 800, 65, np.random.default_rng(1))
    # count each independent draw once: queries, answers and copies repeat earlier draws
    fresh = {"uniform": 65, "recall_uniform": 2 * spec.pairs, "induction_uniform": 8}[name]
    ids = ids[:, :fresh]
    counts = np.bincount(ids.ravel(), minlength=256)
    n, v = counts.sum(), 256
    chi2 = np.sum((counts - n / v) ** 2 / (n / v))  # ~ v - 1 +- sqrt(2 (v - 1)) for iid
    assert chi2 < (v - 1) + 8 * math.sqrt(2 * (v - 1))
    assert abs(corpus.fit_zipf_exponent(ids, v)) < 0.05


@pytest.mark.parametrize("task", ["recall", "induction"])
def test_zipf_and_uniform_variants_differ_only_in_the_law(task):
    """Same seed, same draws: every fresh token of both variants is the inverse CDF of the same
    uniform u, so the Zipf id lies in the Zipf quantile range of the uniform id's cell
    [y / V, (y + 1) / V); the induction periods are equal."""
    a, b = _spec(f"{task}_zipf", pairs=8), _spec(f"{task}_uniform", pairs=8)
    x = corpus.sample(a, 200, 40, np.random.default_rng(7))
    y = corpus.sample(b, 200, 40, np.random.default_rng(7))
    fresh = slice(0, 16) if task == "recall" else slice(0, a.period_min)
    x, y = x[:, fresh], y[:, fresh]
    f = zipf.cdf(a.unigram())
    lo = np.searchsorted(f, y / 64, side="right")
    hi = np.searchsorted(f, (y + 1) / 64 - 1e-12, side="right")
    assert np.all((lo <= x) & (x <= hi)) and np.mean(lo == hi) > 0.5
    if task == "induction":
        pa = induction.sample_with_periods(a, 200, 40, np.random.default_rng(7))[1]
        pb = induction.sample_with_periods(b, 200, 40, np.random.default_rng(7))[1]
        assert np.array_equal(pa, pb)


# ------------------------------------------------------------------ Markov
@pytest.mark.parametrize("name", ["zipf", "uniform"])
def test_markov_structure(name):
    """Exact chain: rows sum to 1, pi is stationary, H(next | current) < H(unigram); a sample
    shows the same conditional entropy (plug-in estimate, slightly biased low)."""
    spec = corpus.CorpusSpec(name, vocab=128, seed=5)
    p, pi = markov.transition_matrix(spec), spec.unigram()
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(pi @ p, pi, atol=1e-12)
    f = corpus.floors(spec, 65)
    assert f["loss_floor"] == f["context_free_loss"] < f["unigram_entropy"] - 0.5
    ids = corpus.sample(spec, 2000, 65, np.random.default_rng(2))
    joint = np.zeros((128, 128))
    np.add.at(joint, (ids[:, :-1].ravel(), ids[:, 1:].ravel()), 1.0)
    joint /= joint.sum()
    cond = joint / np.maximum(joint.sum(1, keepdims=True), 1e-300)
    h_emp = -np.sum(joint * np.log(np.where(cond > 0, cond, 1.0)))
    assert abs(h_emp - f["loss_floor"]) < 0.1
    first = np.bincount(ids[:, 0], minlength=128) / len(ids)
    assert np.abs(first - pi).max() < 5 * np.sqrt(pi.max() / len(ids))


def test_same_maps_for_both_markov_corpora():
    a, b = corpus.CorpusSpec("zipf", seed=7), corpus.CorpusSpec("uniform", seed=7)
    assert np.array_equal(markov.permutations(a), markov.permutations(b))


# ------------------------------------------------------------------ recall
@pytest.mark.parametrize("law", ["zipf", "uniform"])
def test_recall_structure_on_samples(law):
    """Direct check, sequence by sequence: keys and values in the first 2 n positions, then
    each query is one of the keys and its answer the value of the latest pair with it."""
    spec = _spec(f"recall_{law}", vocab=16, pairs=6)  # small vocab: repeated keys are common
    ids = corpus.sample(spec, 300, 29, np.random.default_rng(4))
    repeated = 0
    for seq in ids:
        keys, values = list(seq[:12:2]), list(seq[1:12:2])
        repeated += len(set(keys)) < len(keys)
        rest = seq[12:]
        for i in range(0, len(rest), 2):
            q = rest[i]
            assert q in keys
            if i + 1 < len(rest):
                j = max(j for j, k in enumerate(keys) if k == q)
                assert rest[i + 1] == values[j]
    assert repeated > 50  # the "latest pair" rule was exercised
    assert np.array_equal(
        recall.roles(6, 29), [0, 1] * 6 + [2, 3] * 8 + [2]
    )  # the layout, cut at 29 tokens


def test_recall_floor_equals_a_monte_carlo_of_the_bayes_predictive():
    """The query term E[-log(c / n)] (exact binomial sum) against its sample average, and
    the floor's other terms: H(pi) on keys and values, 0 on answers."""
    spec = _spec("recall_zipf", pairs=10)
    ids = corpus.sample(spec, 4000, 24, np.random.default_rng(5))
    keys, queries = ids[:, 0:20:2], ids[:, 20::2]
    c = (keys[:, None, :] == queries[:, :, None]).sum(-1)
    mc = -np.log(c / 10)
    exact = recall.query_loss(spec.unigram(), 10)
    assert abs(mc.mean() - exact) < 4 * mc.std() / np.sqrt(mc.size)
    h = zipf.entropy(spec.unigram())
    per_t = recall.position_losses(spec, 24)
    np.testing.assert_allclose(per_t, [h] * 19 + [exact, 0.0, exact, 0.0])
    f = corpus.floors(spec, 24)
    assert f["loss_floor"] == pytest.approx(per_t.mean()) and f["context_free_loss"] == h


# ------------------------------------------------------------------ induction
def test_induction_structure_on_samples():
    spec = _spec("induction_zipf", period_min=3, period_max=9)
    ids, h = induction.sample_with_periods(spec, 500, 30, np.random.default_rng(6))
    assert set(h.tolist()) == set(range(3, 10))
    for seq, p in zip(ids, h):
        assert all(seq[t] == seq[t - p] for t in range(p, 30))
    assert np.array_equal(ids, corpus.sample(spec, 500, 30, np.random.default_rng(6)))


def _bayes_brute_force(spec, seq):
    """-log p(x_t | x_<t) by explicit enumeration of the periods (independent of the vectorised
    log-sum-exp): p = sum_h prior_h P(x_<=t | h) / sum_h prior_h P(x_<t | h)."""
    pi = spec.unigram()

    def lik(h, t):  # P(x_0..x_{t-1} | h)
        p = 1.0
        for u in range(t):
            p *= pi[seq[u]] if u < h else float(seq[u] == seq[u - h])
        return p

    hs = range(spec.period_min, spec.period_max + 1)
    return [
        -math.log(sum(lik(h, t + 1) for h in hs) / sum(lik(h, t) for h in hs))
        for t in range(1, len(seq))
    ]


def test_induction_floor_is_the_bayes_predictive():
    spec = _spec("induction_zipf", vocab=8, period_min=2, period_max=5)  # coincidences common
    ids = corpus.sample(spec, 20, 14, np.random.default_rng(8))
    got = induction.bayes_losses(spec, ids)
    want = [_bayes_brute_force(spec, s) for s in ids]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # a known period: fresh tokens cost -log pi, copies nothing
    known = dataclasses.replace(spec, period_min=4, period_max=4)
    ids = corpus.sample(known, 20, 14, np.random.default_rng(9))
    want = np.concatenate([-np.log(known.unigram()[ids[:, 1:4]]), np.zeros((20, 10))], 1)
    np.testing.assert_allclose(induction.bayes_losses(known, ids), want, atol=1e-12)
    f = corpus.floors(known, 14)
    h = zipf.entropy(known.unigram())
    assert abs(f["loss_floor"] - 3 / 13 * h) < 4 * f["loss_floor_se"]


@pytest.mark.parametrize("name", ["recall_uniform", "induction_zipf"])
def test_next_token_is_independent_of_the_current_one_given_the_position(name):
    """The context-free loss is H(pi): the plug-in mutual information of (x_t, x_t+1) at each
    position is at the level of its bias ((V - 1)^2 / (2 N) nats for independent tokens)."""
    spec = _spec(name, vocab=8, pairs=4, period_min=3, period_max=6)
    ids = corpus.sample(spec, 20000, 14, np.random.default_rng(10))
    bias = 49 / (2 * 20000)
    for t in range(13):
        joint = np.zeros((8, 8))
        np.add.at(joint, (ids[:, t], ids[:, t + 1]), 1.0)
        joint /= joint.sum()
        outer = joint.sum(1, keepdims=True) * joint.sum(0, keepdims=True)
        nz = joint > 0
        mi = float(np.sum(joint[nz] * np.log(joint[nz] / outer[nz])))
        assert mi < 4 * bias, (t, mi)


# ------------------------------------------------------------------ text
@pytest.mark.slow
def test_text_corpus_is_deterministic_and_split_by_document():
    spec = corpus.CorpusSpec("text")
    s = text.splits(spec.text_heldout)
    docs, _ = text.documents()
    text.documents.cache_clear()
    text.splits.cache_clear()
    again = text.splits(spec.text_heldout)
    for k in ("train", "heldout"):
        assert np.array_equal(s[k], again[k])
    # the split is by document: every document in exactly one split, as documented
    held = [b for n, b in docs if text.is_heldout(n, spec.text_heldout)]
    train = [b for n, b in docs if not text.is_heldout(n, spec.text_heldout)]
    assert held and train and len(held) + len(train) == len(docs)
    assert s["heldout"].tobytes() == text.SEPARATOR.join(held)
    assert s["train"].tobytes() == text.SEPARATOR.join(train)
    names = [n for n, _ in docs]
    assert names[:-1] == sorted(names[:-1]) and names[-1] == "LICENSE.txt"
    d = corpus.floors(spec, 65)
    assert d["train_sha256"] == hashlib.sha256(s["train"].tobytes()).hexdigest()
    assert d["heldout_bytes"] == len(s["heldout"]) and d["documents"] == len(docs)
    # held-out windows come from held-out bytes only
    win = corpus.sample(spec, 5, 65, np.random.default_rng(0), "heldout")
    h = s["heldout"].tobytes()
    assert all(bytes(w.astype(np.uint8)) in h for w in win)


def test_text_docstrings_in_source_order():
    src = (
        b'"""M."""\nclass A:\n    """A."""\n    def f(self):\n        """f."""\n'
        b'def g():\n    """g."""\n'
    )
    assert text.docstrings(src) == "M.\n\nA.\n\nf.\n\ng."
    assert text.docstrings(b"x = 1\n") is None


def test_bigram_and_unigram_cross_entropy_oracle():
    rng = np.random.default_rng(0)
    train, held = rng.integers(0, 5, 300).astype(np.uint8), rng.integers(0, 5, 50).astype(np.uint8)
    want = 0.0
    for x, y in zip(held[:-1], held[1:]):
        n_xy = sum(1 for a, b in zip(train[:-1], train[1:]) if a == x and b == y)
        n_x = sum(1 for a in train[:-1] if a == x)
        want -= math.log((n_xy + 0.5) / (n_x + 0.5 * 256))
    assert text.bigram_cross_entropy(train, held, 0.5) == pytest.approx(want / 49, rel=1e-12)
    n = np.bincount(train, minlength=256)
    want_u = -np.mean([math.log((n[b] + 0.5) / (300 + 128)) for b in held])
    assert text.unigram_cross_entropy(train, held, 0.5) == pytest.approx(want_u, rel=1e-12)
