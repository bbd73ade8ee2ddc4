"""Sweeps that grow (simlab.engine.grow): a grown directory equals a fresh sweep of the grown
config bit for bit, only the new (point, seed) pairs are computed, conflicting configs are
refused naming the field, and workers, merge, resume, jax.distributed and `simlab info` work
on grown directories."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.engine.config import load_config
from simlab.engine.grow import first_outside
from simlab.engine.info import describe
from simlab.engine.parts import point_keys
from simlab.engine.sweep import run_sweep
from simlab.errors import ConfigError

from conftest import POST_LN_COVARIATES, ToyLab

LAB = ToyLab()
ROOT = Path(__file__).resolve().parents[2]


def toy(seeds=2, num=3, lam=(0.5, 2.0, 8.0), **extra):
    """The toy sweep: drift_norm (log, `num` points) x lambda (q_scale = k_scale, `lam`)."""
    cfg = {
        "axes": [
            {"name": "drift_norm", "space": "log", "start": 0.01, "stop": 100.0, "num": num},
            {"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": list(lam)},
        ],
        "knobs": {"temperature": 0.7},
        "sweep": {"seeds": seeds, "base_seed": 3, "micro_batch": 4},
    }
    cfg.update(extra)
    return cfg


BIG = toy(seeds=4, num=5, lam=(0.5, 1.0, 2.0, 4.0, 8.0))


def assert_same(a, b):
    assert list(a.axes) == list(b.axes)
    for k in a.axes:
        np.testing.assert_array_equal(a.axes[k], b.axes[k])
    assert a.metrics.keys() == b.metrics.keys()
    for k in a.metrics:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def fresh():
    """BIG computed at once, in memory."""
    return run_sweep(BIG, lab=LAB, quiet=True)


@pytest.mark.slow
def test_more_seeds_finer_and_wider_axes_equal_a_fresh_sweep(tmp_path, fresh):
    """3 x 3 x 2 seeds grown to 5 x 5 x 4 seeds (a finer log axis, a value list that includes
    the old values): bit for bit the fresh sweep; only the 82 new pairs are computed, in two
    parts (new points x all seeds, old points x new seeds); the history records both."""
    out = tmp_path / "run"
    run_sweep(toy(), lab=LAB, out=out, quiet=True)
    done = []
    grown = run_sweep(BIG, lab=LAB, out=out, quiet=True, on_chunk=done.append)
    assert_same(grown, fresh)
    assert_same(simlab.load(out), fresh)
    assert sum(c.points for c in done) == 5 * 5 * 4 - 3 * 3 * 2
    assert sorted(p.name for p in (out / "parts").iterdir()) == ["0", "1", "2"]
    parts = {p["name"]: p for p in grown.meta["parts"]}
    assert (parts["1"]["points"], parts["1"]["first_seed"], parts["1"]["seeds"]) == (16, 0, 4)
    assert (parts["2"]["points"], parts["2"]["first_seed"], parts["2"]["seeds"]) == (9, 2, 2)
    first, second = grown.meta["history"]
    assert first["change"] == "created" and first["parts"] == ["0"]
    assert second["change"] == ["axes", "sweep.seeds"] and second["parts"] == ["1", "2"]
    assert (second["pairs_computed"], second["pairs_reused"]) == (82, 18)
    # the original sweep is kept as part 0, loadable on its own
    assert simlab.load(out / "parts" / "0")["cos"].shape == (3, 3, 2, 2)
    # a finished grown sweep reloads, computing nothing
    again = []
    assert_same(run_sweep(BIG, lab=LAB, out=out, quiet=True, on_chunk=again.append), fresh)
    assert again == []


@pytest.mark.slow
def test_grow_in_steps_and_a_new_axis(tmp_path):
    """Grown twice (seeds, then a new temperature axis whose values include the old fixed
    value): each time equal to the fresh sweep; nothing of an earlier step is recomputed."""
    out = tmp_path / "run"
    run_sweep(toy(seeds=1), lab=LAB, out=out, quiet=True)
    run_sweep(toy(seeds=2), lab=LAB, out=out, quiet=True)
    axes = toy()["axes"] + [{"name": "temperature", "values": [0.35, 0.7]}]
    new = toy(axes=axes, knobs={})
    done = []
    grown = run_sweep(new, lab=LAB, out=out, quiet=True, on_chunk=done.append)
    assert sum(c.points for c in done) == 3 * 3 * 2  # only temperature 0.35
    assert_same(grown, run_sweep(new, lab=LAB, quiet=True))
    assert [h["change"] for h in grown.meta["history"]] == [
        "created",
        ["sweep.seeds"],
        ["axes", "knobs.temperature"],
    ]
    text = describe(out)
    assert "history:" in text and "grown (axes, knobs.temperature)" in text
    assert "18 pairs computed (parts 2), 18 reused" in text


@pytest.mark.parametrize(
    "change, field",
    [
        ({"knobs": {"temperature": 0.5}}, "knobs.temperature"),
        ({"sweep": {"seeds": 1, "base_seed": 3, "micro_batch": 4}}, "sweep.seeds"),
        ({"sweep": {"seeds": 2, "base_seed": 4, "micro_batch": 4}}, "sweep.base_seed"),
        ({"sweep": {"seeds": 2, "base_seed": 3, "micro_batch": 2}}, "sweep.micro_batch"),
        ({"sweep": {"seeds": 2, "base_seed": 3, "micro_batch": 4, "metrics": ["cos"]}}, "metrics"),
        ({"axes": toy(lam=(0.5, 2.0, 16.0))["axes"]}, "axes"),
    ],
)
def test_conflicting_config_refused_naming_the_field(tmp_path, change, field):
    """Other knobs, fewer seeds, another base seed, micro-batch or metric list, an axis that
    drops a coordinate: refused, naming the field, and nothing in the directory changes."""
    out = tmp_path / "run"
    run_sweep(toy(), lab=LAB, out=out, quiet=True)
    before = sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*"))
    with pytest.raises(ConfigError, match=rf"holds a different sweep \(differs in: .*{field}"):
        run_sweep(toy(**change), lab=LAB, out=out, quiet=True)
    assert sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*")) == before


def test_other_block_refused_and_a_grown_directory_refuses_its_old_config(tmp_path):
    """Another model (here the toy lab's width) is refused as before; a grown directory refuses
    the config it grew from (it would drop points); the CLI exits 2."""
    out = tmp_path / "run"
    run_sweep(toy(), lab=LAB, out=out, quiet=True)
    with pytest.raises(ConfigError, match=r"differs in: lab\.attributes\.d"):
        run_sweep(toy(seeds=3), lab=ToyLab(d=4), out=out, quiet=True)
    run_sweep(toy(seeds=3), lab=LAB, out=out, quiet=True)
    with pytest.raises(ConfigError, match=r"differs in: sweep\.seeds.*never drops"):
        run_sweep(toy(), lab=LAB, out=out, quiet=True)
    narrow = {"name": "drift_norm", "space": "log", "start": 0.01, "stop": 1.0, "num": 2}
    with pytest.raises(ConfigError, match=r"the point drift_norm=100 that it holds"):
        run_sweep(toy(seeds=3, axes=[narrow, toy()["axes"][1]]), lab=LAB, out=out, quiet=True)


@pytest.mark.slow
def test_cli_grows_and_refuses_with_exit_2(tmp_path, capsys):
    """`simlab sweep --set sweep.seeds=2` on a finished directory grows it and says so;
    another block size exits 2 naming the field."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(GROW_TOML)
    out = tmp_path / "run"
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet", "--set", "sweep.seeds=2"]) == 0
    assert "grown" in capsys.readouterr().out
    other = ["--set", "sweep.seeds=2", "--set", "block.d_model=8"]
    code = main(["sweep", str(cfg), "--out", str(out), "--quiet", *other])
    assert code == 2
    assert "differs in: block.d_model" in capsys.readouterr().err


@pytest.mark.slow
def test_workers_merge_and_resume_on_a_grown_sweep(tmp_path, fresh):
    """Two --worker shares of the growth, then `simlab merge`: equal to the fresh sweep; a
    growth interrupted mid-way resumes from its chunks."""
    out = tmp_path / "run"
    run_sweep(toy(), lab=LAB, out=out, quiet=True)
    for i in (0, 1):
        assert run_sweep(BIG, lab=LAB, out=out, quiet=True, worker=(i, 2)) is None
    assert not (out / "results.npz").exists()
    assert "unfinished grown or refined sweep" in describe(out)
    # (what `simlab merge` does; a custom lab's directory is merged from Python)
    merged = run_sweep(json.loads((out / "sweep.json").read_text())["config"], lab=LAB, out=out)
    assert merged.meta["chunks_computed"] == 0
    assert_same(merged, fresh)

    class Abort(Exception):
        pass

    out2 = tmp_path / "run2"
    run_sweep(toy(), lab=LAB, out=out2, quiet=True, chunk_size=4)
    calls = []

    def abort(info):
        calls.append(info)
        if len(calls) == 3:
            raise Abort

    with pytest.raises(Abort):
        run_sweep(BIG, lab=LAB, out=out2, quiet=True, chunk_size=4, on_chunk=abort)
    done = []
    resumed = run_sweep(BIG, lab=LAB, out=out2, quiet=True, chunk_size=4, on_chunk=done.append)
    assert sum(c.points for c in calls[:3] + done) == 82  # nothing computed twice
    assert_same(resumed, fresh)


def test_a_one_micro_batch_sweep_grown_is_bit_identical(tmp_path):
    """A sweep whose chunks held one micro-batch per device (a grid of one micro-batch) grown
    into one whose chunks hold several: bit for bit too, since the chunk program never has a
    leading dimension of 1 (simlab.engine.compile)."""
    out = tmp_path / "run"
    small = toy(num=2, lam=(0.5, 8.0))  # 4 points: one micro-batch of 4
    assert run_sweep(small, lab=LAB, out=out, quiet=True).meta["layout"]["chunk_points"] == 4
    grown = run_sweep(BIG, lab=LAB, out=out, quiet=True)
    assert_same(grown, run_sweep(BIG, lab=LAB, quiet=True))


@pytest.mark.slow
def test_micro_batch_one_grows_bit_for_bit(tmp_path):
    """micro_batch = 1 (each point alone, no vmap): the grown sweep is the fresh one bit for
    bit."""
    one = {"seeds": 2, "base_seed": 3, "micro_batch": 1}
    out = tmp_path / "run"
    run_sweep(toy(sweep=one), lab=LAB, out=out, quiet=True)
    big = toy(num=5, sweep={**one, "seeds": 3})
    grown = run_sweep(big, lab=LAB, out=out, quiet=True)
    assert_same(grown, run_sweep(big, lab=LAB, quiet=True))


def test_point_identity_and_containment():
    """Points are identified by every knob in the knob dtype; containment allows a relative
    1e-6 (another geomspace's rounding of the same coordinate) and nothing more."""
    cfg = load_config(BIG)
    keys = point_keys(cfg.point_values(), cfg.knobs, cfg.n_points)
    assert len(set(keys)) == cfg.n_points == 25
    old = {"q_scale": np.array([1.0, 2.0])}
    assert first_outside(old, {"q_scale": np.array([1.0 + 1e-9, 2.0, 3.0])}) is None
    assert first_outside(old, {"q_scale": np.array([1.0, 2.001])}) == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


GROW_TOML = """
[block]
kind = "post_ln"
d_model = 16
n_heads = 2
mlp_ratio = 2
[inputs]
kind = "gaussian"
batch = 2
length = 8
[[axes]]
name = "drift_norm"
space = "log"
start = 0.01
stop = 10.0
num = 3
[[axes]]
name = "temperature"
space = "log"
start = 0.01
stop = 10.0
num = 3
[sweep]
seeds = 1
micro_batch = 2
metrics = ["attn_entropy", "out_cos"]
"""
GROWN = {"axes.0.num=5", "axes.1.num=5", "sweep.seeds=2"}


@pytest.mark.slow
def test_jax_distributed_grows_a_sweep(tmp_path):
    """Two jax.distributed processes grow a sweep (each part shared, process 0 assembles):
    equal to the fresh grown sweep in one process."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(GROW_TOML)
    out = tmp_path / "run"
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    port = free_port()
    sets = [a for s in sorted(GROWN) for a in ("--set", s)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "simlab",
                "sweep",
                str(cfg),
                "--out",
                str(out),
                "--quiet",
                *sets,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    res = simlab.load(out)
    from simlab.engine.tomlio import apply_overrides, read_toml

    want = run_sweep(apply_overrides(read_toml(cfg), sorted(GROWN)), quiet=True)
    assert_same(res, want)
    assert res.meta["n_processes"] == 2


def test_grown_sweep_carries_every_seeds_covariates(tmp_path):
    """The parts' seeds (first_seed ..) each get their own covariates, as a fresh sweep's."""
    cfg = dict(
        block=dict(kind="post_ln", d_model=8, n_heads=2, mlp_ratio=1),
        inputs=dict(kind="gaussian", batch=2, length=4),
        axes=[dict(name="drift_norm", values=[0.0, 1.0])],
        sweep=dict(seeds=2, micro_batch=1),
    )
    out = tmp_path / "run"
    run_sweep(cfg, out=out, quiet=True)
    more = {**cfg, "sweep": {**cfg["sweep"], "seeds": 3}}
    grown, fresh = run_sweep(more, out=out, quiet=True), run_sweep(more, quiet=True)
    assert set(grown.covariates) == set(fresh.covariates) == POST_LN_COVARIATES
    for k in fresh.covariates:
        np.testing.assert_array_equal(grown.covariates[k], fresh.covariates[k], err_msg=k)
    assert len(set(fresh.covariates["drift_vo"][:, 0])) == 3  # three seeds, three draws
