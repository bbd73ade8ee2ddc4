"""Sweeps over a checkpoint from a config: the [checkpoint] table, experiments/checkpoint_clamp.toml
on the tiny BERT fixture, the checkpoint's file hashes in the fingerprint (never resumed on other
weights), and the refusals."""

from __future__ import annotations

import builtins
import collections
import io
import json
import pathlib
import shutil

import numpy as np
import pytest

import simlab
from simlab.checkpoints import files, load
from simlab.core.lab import Lab
from simlab.engine.config import fingerprint, load_config
from simlab.engine.tomlio import read_toml
from simlab.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "checkpoints"
EXPERIMENT = ROOT / "experiments" / "checkpoint_clamp.toml"


def config(path=FIXTURES / "bert", **tables) -> dict:
    raw = read_toml(EXPERIMENT)
    raw["checkpoint"] = {**raw["checkpoint"], "path": str(path)}
    raw["axes"][0]["num"] = 3
    for k, v in tables.items():
        raw[k] = {**raw.get(k, {}), **v}
    return raw


def test_the_experiment_runs_on_the_fixture(tmp_path):
    res = simlab.run_sweep(config(), out=tmp_path / "run", quiet=True)
    assert res["attn_entropy"].shape == (3, 2)
    np.testing.assert_allclose(res["attn_entropy"], 1.0, rtol=1e-6)  # the uniform clamp
    meta = res.meta
    ck = meta["config"]["checkpoint"]
    assert ck["architecture"] == "bert" and ck["layer"] == 1
    assert ck["files"]["model.safetensors"] == files.sha256(FIXTURES / "bert" / "model.safetensors")
    assert "seeds vary only the inputs" in res.summary() and "inputs only" in meta["seeds_vary"]
    assert meta["config"]["block"]["activation"] == "gelu_exact"
    # the resolved config reads back to the same fingerprint
    assert fingerprint(load_config(meta["config"]).to_dict()) == meta["fingerprint"]


def test_config_paths_are_relative_to_the_config_file(tmp_path, monkeypatch):
    """experiments/checkpoint_clamp.toml runs from any directory (its checkpoint.path is
    relative to its folder); a --set path is relative to the current directory."""
    from simlab import cli

    monkeypatch.chdir(tmp_path)
    small = ["--set", "axes.0.num=2", "--quiet"]
    assert cli.main(["sweep", str(EXPERIMENT), "--out", "a", *small]) == 0
    rec = json.loads((tmp_path / "a" / "meta.json").read_text())["config"]["checkpoint"]
    assert pathlib.Path(rec["path"]) == (FIXTURES / "bert").resolve()
    shutil.copytree(FIXTURES / "bert", tmp_path / "here")
    assert (
        cli.main(["sweep", str(EXPERIMENT), "--out", "b", "--set", "checkpoint.path=here"] + small)
        == 0
    )
    rec = json.loads((tmp_path / "b" / "meta.json").read_text())["config"]["checkpoint"]
    assert (
        rec["path"] == "here"
        and rec["files"]
        == json.loads((tmp_path / "a" / "meta.json").read_text())["config"]["checkpoint"]["files"]
    )


def count_reads(folder: pathlib.Path, monkeypatch) -> collections.Counter:
    """From now on, the times each file of `folder` is opened (io.open and open), by name."""
    reads = collections.Counter()
    real = io.open

    def counting(file, *args, **kwargs):
        if isinstance(file, (str, pathlib.Path)) and pathlib.Path(file).resolve().parent == folder:
            reads[pathlib.Path(file).name] += 1
        return real(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting)
    monkeypatch.setattr(builtins, "open", counting)
    return reads


def test_a_sweep_reads_each_checkpoint_file_once(tmp_path, monkeypatch):
    """From the [checkpoint] table to the block, a sweep opens config.json and the weights file
    once each (the weight source reads, hashes and parses the same bytes)."""
    ck = shutil.copytree(FIXTURES / "bert", tmp_path / "ck").resolve()
    reads = count_reads(ck, monkeypatch)
    res = simlab.run_sweep(config(ck), out=tmp_path / "run", quiet=True)
    assert res.meta["config"]["checkpoint"]["files"].keys() == {"config.json", "model.safetensors"}
    assert reads == {"config.json": 1, "model.safetensors": 1}


def test_growing_and_merging_read_each_checkpoint_file_once(tmp_path, monkeypatch):
    """Growing a checkpoint sweep (more seeds: a composite of parts, each a plain sweep) and
    `simlab merge` of a directory a worker left (its stored config) read config.json and the
    weights file once each, as a plain sweep does: the parts share the Weights read once."""
    from simlab import cli

    ck = shutil.copytree(FIXTURES / "bert", tmp_path / "ck").resolve()
    simlab.run_sweep(config(ck), out=tmp_path / "run", quiet=True)
    simlab.run_sweep(config(ck), out=tmp_path / "half", quiet=True, worker=(0, 2))
    reads = count_reads(ck, monkeypatch)
    chunks = []
    grown = simlab.run_sweep(
        config(ck, sweep={"seeds": 3}), out=tmp_path / "run", quiet=True, on_chunk=chunks.append
    )
    assert grown.meta["parts"] and chunks  # a composite sweep that computed a new part
    assert reads == {"config.json": 1, "model.safetensors": 1}
    reads.clear()
    assert cli.main(["merge", str(tmp_path / "half"), "--quiet"]) == 0
    assert reads == {"config.json": 1, "model.safetensors": 1}


def test_a_stored_config_reads_no_weights_until_it_is_run(tmp_path):
    """load_config(..., read_weights=False) of a recorded config reads nothing (weights None);
    building its lab reads them then, from the recorded files, and the lab counts as the
    config's own (its fingerprint is the config's)."""
    from simlab.engine import plain

    res = simlab.run_sweep(config(), out=tmp_path / "run", quiet=True)
    stored = load_config(res.meta["config"], read_weights=False)
    assert stored.weights is None and stored.checkpoint.files is not None
    lab, _ = plain.build_lab(stored)
    assert lab.weights.source == stored.checkpoint and lab.weights.layers == range(1, 2)
    assert plain.lab_identity(lab, stored) is None


@pytest.mark.parametrize(
    "tensor,bad",
    [
        ("encoder.layer.0.attention.self.query.weight", np.nan),  # a layer below the one studied
        ("encoder.layer.1.output.dense.weight", np.inf),
        ("embeddings.word_embeddings.weight", -np.inf),
    ],
)
def test_a_non_finite_weight_is_refused_at_load_naming_file_and_tensor(tmp_path, tensor, bad):
    from safetensors.numpy import save_file

    moved = shutil.copytree(FIXTURES / "bert", tmp_path / "ck")
    t, _ = files.read_tensors(moved)
    t = {k: np.array(v) for k, v in t.items()}
    t[tensor].reshape(-1)[3] = bad
    save_file(t, str(moved / "model.safetensors"))
    message = rf"model.safetensors: tensor '{tensor}' holds 1 NaN or Inf values"
    with pytest.raises(ConfigError, match=message):
        load(moved)
    with pytest.raises(ConfigError, match=message):
        simlab.run_sweep(config(moved), out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_the_fingerprint_names_the_files_not_the_folder(tmp_path):
    moved = shutil.copytree(FIXTURES / "bert", tmp_path / "moved")
    a = fingerprint(load_config(config()).to_dict())
    assert fingerprint(load_config(config(moved)).to_dict()) == a
    t, _ = files.read_tensors(moved)
    t["encoder.layer.1.output.dense.bias"] = t["encoder.layer.1.output.dense.bias"] + 1.0
    from safetensors.numpy import save_file

    save_file(t, str(moved / "model.safetensors"))
    assert fingerprint(load_config(config(moved)).to_dict()) != a


def test_never_resumed_on_other_weights(tmp_path):
    ck = shutil.copytree(FIXTURES / "bert", tmp_path / "ck")
    out = tmp_path / "run"
    simlab.run_sweep(config(ck), out=out, quiet=True)
    shutil.copy(FIXTURES / "roberta" / "model.safetensors", ck / "model.safetensors")
    shutil.copy(FIXTURES / "roberta" / "config.json", ck / "config.json")
    with pytest.raises(ConfigError):
        simlab.run_sweep(config(ck), out=out, quiet=True)
    recorded = json.loads((out / "meta.json").read_text())["config"]
    with pytest.raises(ConfigError, match=r"checkpoint.files: config.json of .* is not the file"):
        load_config(recorded)


def test_a_lab_given_weights_is_fingerprinted_by_them():
    bert, roberta = load(FIXTURES / "bert"), load(FIXTURES / "roberta")
    raw = config()
    raw.pop("checkpoint")
    raw["block"] = {**bert.block_fields(), "pattern": "uniform"}
    raw["axes"][0]["num"] = 2
    cfg = load_config(raw)
    fps = []
    for ck in (bert, roberta):
        res = simlab.run_sweep(cfg, lab=Lab(cfg.block, cfg.inputs, weights=ck.at(1)), quiet=True)
        fps.append(res.meta["fingerprint"])
        assert res.meta["config"]["lab"]["weights"]["files"] == dict(ck.hashes)
    assert fps[0] != fps[1]


@pytest.mark.parametrize(
    "change,message",
    [
        ({"block": {"d_model": 32}}, r"block.d_model: 32 differs from the checkpoint's 16"),
        (
            {"block": {"qk_norm": "rmsnorm"}},
            r"block.qk_norm: 'rmsnorm' differs from the checkpoint's 'none'",
        ),
        ({"checkpoint": {"layer": 2}}, r"checkpoint.layer: \[2\] is outside the checkpoint's"),
        ({"checkpoint": {"layer": 1}, "block": {"depth": 2}}, r"checkpoint.layer: \[1, 2\] is"),
        ({"checkpoint": {"path": "/nowhere/x"}}, r"checkpoint.path: '/nowhere/x' does not exist"),
        ({"checkpoint": {"revision": "main"}}, r"checkpoint.revision: unknown field"),
        (
            {"inputs": {"vocab": 30522}},
            r"inputs.vocab: 30522 \(also InputSpec's default, when \[inputs\] gives none\) exceeds "
            r"the checkpoint's vocab_size 100 .*; set inputs.vocab to at most 100",
        ),
        ({"checkpoint": {"ids": "/nowhere/ids.npy"}}, r"checkpoint.ids: cannot read"),
    ],
)
def test_refusals(change, message):
    with pytest.raises(ConfigError, match=message):
        simlab.run_sweep(config(**change), quiet=True)


def test_fixed_ids_from_a_file(tmp_path):
    ids = np.load(FIXTURES / "bert" / "oracle.npz")["ids"]
    np.save(tmp_path / "ids.npy", ids)
    raw = config(checkpoint={"ids": str(tmp_path / "ids.npy")}, inputs={"batch": 2, "length": 12})
    raw["knobs"] = {"drift_norm": 0.0}
    raw["axes"] = [{"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": [1.0, 2.0]}]
    res = simlab.run_sweep(raw, block={"pattern": "softmax", "depth": 1}, quiet=True)
    out_cos = np.asarray(res["out_cos"])
    np.testing.assert_array_equal(out_cos[:, 0], out_cos[:, 1])  # seeds: the same fixed ids
