"""The checkpoint-series quantities against HF's own attention weights and hidden states (the
oracles of tests/fixtures/checkpoints) and a numpy computation of the mean queries and keys."""

from __future__ import annotations

import csv
import json
import pathlib
import re
import shutil

import jax
import numpy as np
import pytest

from simlab.checkpoints import load
from simlab.studies import series

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints"
ARCHS = ("bert", "roberta", "gpt2", "gpt_neox", "gpt_neox_sequential")


def np_cos(x_ND):
    u = x_ND / np.linalg.norm(x_ND, axis=-1, keepdims=True)
    n = len(u)
    return (np.sum(np.sum(u, 0) ** 2) - n) / (n * (n - 1))


def np_entropy(w_BHTS, causal):
    """Per head: mean over rows of H_i / log n_i, the first causal row left out."""
    t = w_BHTS.shape[2]
    h = -np.sum(np.where(w_BHTS > 0, w_BHTS * np.log(np.maximum(w_BHTS, 1e-300)), 0), -1)
    n = np.arange(1, t + 1) if causal else np.full(t, w_BHTS.shape[3])
    keep = n > 1
    return np.mean((h[..., keep] / np.log(n[keep])), axis=(0, 2))


@pytest.mark.parametrize("arch", ARCHS)
def test_quantities_match_the_hf_oracle(arch):
    oracle = np.load(FIXTURES / arch / "oracle.npz")
    with jax.enable_x64(True):
        ck = load(FIXTURES / arch)
        q = series.checkpoint_quantities(ck, oracle["ids"])
    causal = ck.fields["causal"]
    for l in range(ck.n_layers):
        np.testing.assert_allclose(q["entropy"][l], np_entropy(oracle["attn64"][l], causal), 1e-10)
        y = oracle["hidden64"][l + 1]
        np.testing.assert_allclose(q["anisotropy"][l], np_cos(y.reshape(-1, y.shape[-1])), 1e-10)
        within = np.mean([np_cos(s) for s in y])
        np.testing.assert_allclose(q["anisotropy_within"][l], within, 1e-10)


def test_mean_query_and_key_by_numpy():
    """GPT-2: q = LN1(x) W_Q + b_Q from HF's layer input and the stored weights."""
    oracle = np.load(FIXTURES / "gpt2" / "oracle.npz")
    with jax.enable_x64(True):
        ck = load(FIXTURES / "gpt2")
        q = series.checkpoint_quantities(ck, oracle["ids"])
    for l in range(ck.n_layers):
        p = {k: np.asarray(v[l], np.float64) for k, v in ck.params.items()}
        x = oracle["hidden64"][l]
        a = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        a = a * p["ln1_g"] + p["ln1_b"]
        mq = np.einsum("btd,dhk->hk", a, p["wq"]) / a.shape[0] / a.shape[1] + p["bq"]
        mk = np.einsum("btd,dhk->hk", a, p["wk"]) / a.shape[0] / a.shape[1] + p["bk"]
        np.testing.assert_allclose(q["q_mean_norm"][l], np.linalg.norm(mq, axis=-1), 1e-10)
        np.testing.assert_allclose(q["k_mean_norm"][l], np.linalg.norm(mk, axis=-1), 1e-10)
        cos = np.sum(mq * mk, -1) / np.linalg.norm(mq, axis=-1) / np.linalg.norm(mk, axis=-1)
        np.testing.assert_allclose(q["qk_mean_cos"][l], cos, 1e-10)


def test_series_table_and_figure(tmp_path):
    root = tmp_path / "run"
    for step in (1000, 10, 143000):
        shutil.copytree(FIXTURES / "gpt_neox", root / f"step{step}")
    ids = np.load(FIXTURES / "gpt_neox" / "oracle.npz")["ids"]
    table = series.series(root, ids)
    assert len(table) == 3 * 2 * 2  # steps x layers x heads
    assert [r["step"] for r in table[::4]] == [10, 1000, 143000]
    csv_path = series.write_table(table, tmp_path / "t.csv")
    with open(csv_path) as f:
        read = list(csv.DictReader(f))
    assert list(read[0]) == list(series.COLUMNS) and len(read) == 12
    js = json.loads(series.write_table(table, tmp_path / "t.json").read_text())
    assert js[5]["layer"] == table[5]["layer"] and js[5]["entropy"] == table[5]["entropy"]
    series.figure(table, tmp_path / "f.png", label="tiny gpt_neox")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_the_labs_own_training_run_gives_the_same_table(tmp_path):
    """A train-dynamics Results (every metric (step, layer, head, seed), per-layer ones with a
    size-1 head dim) as the same table, the mean over seeds, drawn beside a checkpoint series."""
    from collections import OrderedDict

    from simlab.engine.results import Results

    rng = np.random.default_rng(0)
    axes = OrderedDict(step=np.array([1.0, 10.0, 100.0]), layer=np.arange(2.0), head=np.arange(3.0))
    metrics = {m: rng.random((3, 2, 3, 2)) for m in ("q_mean_norm", "k_mean_norm", "qk_mean_cos")}
    metrics["attn_entropy"] = rng.random((3, 2, 3, 2))
    metrics["out_cos"] = rng.random((3, 2, 1, 2))
    metrics["out_cos_within"] = rng.random((3, 2, 1, 2))
    table = series.from_train_dynamics(Results(axes, metrics, {}), "tiny run")
    assert len(table) == 3 * 2 * 3
    r = table[1 * 6 + 1 * 3 + 2]  # step 10, layer 1, head 2
    assert (r["step"], r["layer"], r["head"]) == (10, 1, 2)
    assert r["entropy"] == pytest.approx(metrics["attn_entropy"][1, 1, 2].mean())
    assert r["anisotropy"] == pytest.approx(metrics["out_cos"][1, 1, 0].mean())
    ids = np.load(FIXTURES / "gpt_neox" / "oracle.npz")["ids"]
    ck = series.series([("step5", load(FIXTURES / "gpt_neox"))], ids)
    fig = series.figure({"pythia-like": ck, "lab": table}, tmp_path / "both.png")
    assert len(fig.axes) == 2 * len(series.QUANTITIES)


def series_folder(tmp_path, arch="bert", steps=(20, 3)):
    root = tmp_path / "run"
    for step in steps:
        shutil.copytree(FIXTURES / arch, root / f"step{step}")
    return root


def test_the_command_line_table_is_the_python_apis(tmp_path):
    """`simlab series FOLDER --ids --out` writes series.series's table (CSV and JSON, every
    float as stored), and --figure draws it; on text, the ids are the text kind's windows."""
    from simlab import cli

    root = series_folder(tmp_path)
    ids = np.load(FIXTURES / "bert" / "oracle.npz")["ids"]
    np.save(tmp_path / "ids.npy", ids)
    want = series.series(root, ids)
    args = ["series", str(root), "--ids", str(tmp_path / "ids.npy")]
    assert (
        cli.main([*args, "--out", str(tmp_path / "t.csv"), "--figure", str(tmp_path / "f.png")])
        == 0
    )
    with open(tmp_path / "t.csv") as f:
        got = list(csv.DictReader(f))
    assert [r["checkpoint"] for r in got[::4]] == ["step3", "step20"]
    for g, w in zip(got, want, strict=True):
        assert {k: type(w[k])(g[k]) for k in series.COLUMNS} == w
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert cli.main([*args, "--out", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text()) == want
    # windows of text: the table of the text kind's windows of the same seed
    corpus = tmp_path / "c.txt"
    corpus.write_text("the value of a knob is the scale of the queries and the keys . " * 10)
    text = ["--text", str(corpus), "--batch", "3", "--length", "9", "--seed", "5"]
    assert cli.main(["series", str(root), *text, "--out", str(tmp_path / "x.json")]) == 0
    sample = series.text_sample(load(root / "step3"), str(corpus), 3, 9, 5)
    assert np.all(sample[:, 0] == 2) and np.all(sample[:, -1] == 3)  # [CLS] ... [SEP]
    assert json.loads((tmp_path / "x.json").read_text()) == series.series(root, sample)


def test_command_line_errors_exit_2_naming_the_path(tmp_path, capsys):
    from simlab import cli

    root = series_folder(tmp_path)
    np.save(tmp_path / "ids.npy", np.full((2, 5), 500))
    short = tmp_path / "short.txt"
    short.write_text("the value")
    cases = [
        ([str(tmp_path / "nope"), "--ids", str(tmp_path / "ids.npy")], "nope' is not a directory"),
        ([str(root), "--ids", str(tmp_path / "none.npy")], "none.npy"),
        ([str(root), "--ids", str(tmp_path / "ids.npy")], "--ids on .*step3.*0..99"),
        ([str(root), "--text", str(short), "--length", "9"], "--text: .*short.txt"),
        ([str(root), "--text", str(short), "--length", "2"], "--length: 2 leaves no text"),
        ([str(root)], "--ids / --text: give exactly one"),
    ]
    for args, msg in cases:
        out = tmp_path / "t.csv"
        assert cli.main(["series", *args, "--out", str(out)]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("simlab: error: ") and "\n" not in err
        assert re.search(msg, err), (msg, err)
        assert not out.exists()
    assert cli.main(["series", str(root), "--ids", "x.npy", "--out", str(tmp_path / "t.txt")]) == 2
    assert "must end in .csv or .json" in capsys.readouterr().err
