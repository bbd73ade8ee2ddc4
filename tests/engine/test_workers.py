"""Sweeps split across workers, processes and devices, and a chunk store that cannot be fooled
(docs/design.md, "Work units"): the unit partition, --worker runs merged bit for bit, a killed
worker re-run, jax.distributed with two CPU processes, concurrent writers, bad chunk files,
orphan temporary files, and the multi-device stable-rank sweep that used to hang."""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.engine.claims import HOST
from simlab.engine.records import RECORD, chunk_record
from simlab.engine.schedule import share_of

ROOT = Path(__file__).resolve().parents[2]
CFG = """
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
values = [0.0, 0.5, 2.0, 8.0]
[[axes]]
name = "temperature"
values = [0.3, 1.0, 3.0]
[sweep]
seeds = 2
micro_batch = 1
chunk_size = 1
metrics = ["out_cos", "attn_entropy", "stable_rank", "q_mean_norm"]
"""
N_CHUNKS = 2 * 12  # seeds x micro-batches: one chunk per micro-batch at chunk_size 1


def cfg_file(tmp_path, text=CFG, name="cfg.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def sweep_cmd(cfg, out, *extra):
    return [
        sys.executable,
        "-m",
        "simlab",
        "sweep",
        str(cfg),
        "--out",
        str(out),
        "--quiet",
        *map(str, extra),
    ]


def env(devices: int = 1):
    e = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return e


def assert_same(res, ref):
    assert set(res.metrics) == set(ref.metrics)
    for k in ref.metrics:
        np.testing.assert_array_equal(res.metrics[k], ref.metrics[k], err_msg=k)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, one device, everything."""
    d = tmp_path_factory.mktemp("single")
    return simlab.run_sweep(cfg_file(d), out=d / "run", quiet=True)


# ------------------------------------------------------------------------------- the partition
@pytest.mark.parametrize("seeds,n_mb,n", [(1, 1, 1), (2, 9, 2), (3, 7, 4), (2, 5, 8), (1, 3, 3)])
def test_unit_partition(seeds, n_mb, n):
    """The shares of N workers are disjoint, cover every (seed, micro-batch) unit, differ in size
    by at most one, and depend on (seeds, n_mb, I, N) only (no device count enters)."""
    shares = [share_of((i, n), seeds, n_mb) for i in range(n)]
    units = [{(s, m) for s, ms in sh.items() for m in ms} for sh in shares]
    assert set().union(*units) == set(itertools.product(range(seeds), range(n_mb)))
    assert sum(map(len, units)) == seeds * n_mb  # disjoint
    assert max(map(len, units)) - min(map(len, units)) <= 1
    assert shares == [share_of((i, n), seeds, n_mb) for i in range(n)]
    assert share_of(None, seeds, n_mb) == {s: set(range(n_mb)) for s in range(seeds)}


# ------------------------------------------------------------------------------- workers
@pytest.mark.slow
def test_two_workers_then_merge(tmp_path, single):
    """`--worker 0/2` and `--worker 1/2` at once, then `simlab merge`: nothing left to compute,
    the arrays equal the single-process run bit for bit."""
    cfg, out = cfg_file(tmp_path), tmp_path / "run"
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            sweep_cmd(cfg, out, "--worker", f"{i}/2"),
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    wall = time.perf_counter() - t0
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(list((out / "chunks").glob("*.npz"))) == N_CHUNKS
    assert not (out / "results.npz").exists()  # workers do not merge
    assert main(["merge", str(out), "--quiet"]) == 0
    res = simlab.load(out)
    assert res.meta["chunks_computed"] == 0 and res.meta["chunks_reused"] == N_CHUNKS
    assert_same(res, single)
    assert not (out / "claims").exists() and not (out / ".lock").exists()  # tidied
    print(f"two workers: {wall:.1f} s wall")


@pytest.mark.slow
def test_worker_from_slurm_array(tmp_path, single, monkeypatch):
    """Without --worker, SLURM_ARRAY_TASK_ID / _COUNT (and _MIN) pick the share."""
    cfg, out = cfg_file(tmp_path), tmp_path / "run"
    for task in (5, 6):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task))
        monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
        monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "5")
        assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
        n = len(list((out / "chunks").glob("*.npz")))
        assert n == (N_CHUNKS // 2 if task == 5 else N_CHUNKS)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert simlab.load(out).meta["chunks_computed"] == 0
    assert_same(simlab.load(out), single)


@pytest.mark.slow
def test_killed_worker_is_rerun(tmp_path):
    """A worker killed (SIGKILL) after its first chunks leaves a claim and maybe a temporary
    file; running it again takes over (the claim's process is gone), then the merge is exact.
    A larger grid (192 chunks) than the other tests, so that the kill lands mid-run even when
    the machine is loaded."""
    big = CFG.replace(
        "values = [0.0, 0.5, 2.0, 8.0]", 'space = "log"\nstart = 0.01\nstop = 10.0\nnum = 16'
    )
    big = big.replace("values = [0.3, 1.0, 3.0]", "values = [0.3, 0.5, 1.0, 1.5, 2.0, 3.0]")
    n_chunks = 2 * 16 * 6
    cfg, out = cfg_file(tmp_path, big), tmp_path / "run"
    p = subprocess.Popen(
        sweep_cmd(cfg, out, "--worker", "0/2"),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / "chunks").glob("*.npz"))) < 2:
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    done = len(list((out / "chunks").glob("*.npz")))
    assert 2 <= done < n_chunks // 2, done  # killed mid-run
    for i in (0, 1):
        r = subprocess.run(
            sweep_cmd(cfg, out, "--worker", f"{i}/2"),
            env=env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
    assert main(["merge", str(out), "--quiet"]) == 0
    res = simlab.load(out)
    assert res.meta["chunks_computed"] == 0
    assert_same(res, simlab.run_sweep(cfg, out=None, quiet=True))
    assert not (out / "claims").exists() and not (out / ".lock").exists()  # tidied
    assert not [q for q in out.rglob(".*.tmp")]


@pytest.mark.slow
def test_workers_with_1_and_2_devices(tmp_path, single):
    """Worker 0 of 2 on two devices, worker 1 on one, then `simlab merge`: equal to the
    single-process reference bit for bit (a unit's numbers never depend on who ran it)."""
    cfg, out = cfg_file(tmp_path), tmp_path / "run"
    for i, devices in ((0, 2), (1, 1)):
        assert simlab.run_sweep(cfg, out=out, quiet=True, worker=(i, 2), devices=devices) is None
    assert main(["merge", str(out), "--quiet"]) == 0
    assert_same(simlab.load(out), single)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_jax_distributed_two_cpu_processes(tmp_path, single):
    """Two processes under jax.distributed (local coordinator): each takes its share, process 0
    merges, both return the merged Results, equal to one process bit for bit."""
    cfg, out, port = cfg_file(tmp_path), tmp_path / "run", free_port()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            sweep_cmd(
                cfg,
                out,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                2,
                "--process-id",
                i,
            ),
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    wall = time.perf_counter() - t0
    assert [p.returncode for p in procs] == [0, 0], outs
    res = simlab.load(out)
    assert res.meta["n_processes"] == 2
    assert_same(res, single)
    assert all("results in" in o for o, _ in outs)  # both returned the merged results
    print(f"jax.distributed, 2 processes: {wall:.1f} s wall")


# ------------------------------------------------------------------------------- writers
@pytest.mark.slow
def test_concurrent_different_configs(tmp_path):
    """Two different configs started together into one --out: one runs, the other is refused
    (exit 2, naming what differs); the directory holds only the winner's chunks."""
    a, b = (
        cfg_file(tmp_path),
        cfg_file(tmp_path, CFG.replace("0.3, 1.0, 3.0", "0.2, 1.0, 3.0"), "other.toml"),
    )
    out = tmp_path / "run"
    procs = [
        subprocess.Popen(
            sweep_cmd(c, out), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for c in (a, b)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outs
    loser = outs[codes.index(2)][1]
    assert "holds a different sweep" in loser and "axes" in loser
    winner = simlab.load(out)
    assert len(list((out / "chunks").glob("*.npz"))) == N_CHUNKS
    assert winner.meta["chunks_rejected"] == []


CHUNK_LOG = textwrap.dedent(r"""
    import json, sys, simlab
    got = []
    simlab.run_sweep(sys.argv[1], out=sys.argv[2], quiet=True,
                     on_chunk=lambda c: got.append([c.seed, c.start, c.stop]))
    print("CHUNKS" + json.dumps(got))
""")


@pytest.mark.slow
def test_concurrent_same_config_computes_each_unit_once(tmp_path, single):
    cfg, out = cfg_file(tmp_path), tmp_path / "run"
    script = tmp_path / "log_chunks.py"
    script.write_text(CHUNK_LOG)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(cfg), str(out)],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    ranges = [json.loads(o.split("CHUNKS", 1)[1]) for o, _ in outs]
    units = [{(s, m) for s, a, b in r for m in range(a, b)} for r in ranges]
    assert not units[0] & units[1]  # no unit computed twice
    assert len(units[0] | units[1]) == N_CHUNKS
    assert_same(simlab.load(out), single)


@pytest.mark.slow
def test_bad_chunk_files_are_named_and_recomputed(tmp_path, single, caplog):
    """Truncated, empty, bit-flipped, foreign (another sweep's) and incomplete (a metric
    missing) chunk files are each rejected by name, moved to rejected/, recomputed."""
    cfg, out = cfg_file(tmp_path), tmp_path / "run"
    simlab.run_sweep(cfg, out=out, quiet=True)
    other = tmp_path / "other"
    simlab.run_sweep(
        cfg_file(tmp_path, CFG.replace("seeds = 2", "seeds = 1"), "o.toml"), out=other, quiet=True
    )
    ch = out / "chunks"
    data = (ch / "seed0_mb0-1.npz").read_bytes()
    (ch / "seed0_mb0-1.npz").write_bytes(data[: len(data) // 2])  # truncated
    (ch / "seed0_mb1-2.npz").write_bytes(b"")  # empty
    flip = bytearray((ch / "seed0_mb2-3.npz").read_bytes())
    flip[len(flip) // 3] ^= 0x10  # one bit
    (ch / "seed0_mb2-3.npz").write_bytes(bytes(flip))
    (ch / "seed0_mb3-4.npz").write_bytes((other / "chunks" / "seed0_mb3-4.npz").read_bytes())
    with np.load(ch / "seed1_mb0-1.npz") as z:
        arrays = {k: z[k] for k in z.files if k not in (RECORD, "stable_rank")}
    fp = json.loads((out / "sweep.json").read_text())["fingerprint"]
    np.savez(
        ch / "seed1_mb0-1.npz",
        **arrays,
        **{RECORD: np.asarray(chunk_record(fp, (1, 0, 1), arrays))},
    )  # a valid record, one metric short
    bad = [
        "seed0_mb0-1.npz",
        "seed0_mb1-2.npz",
        "seed0_mb2-3.npz",
        "seed0_mb3-4.npz",
        "seed1_mb0-1.npz",
    ]
    (out / "results.npz").unlink()
    with caplog.at_level(logging.WARNING, logger="simlab.engine.sweep"):
        res = simlab.run_sweep(cfg, out=out, quiet=True)
    assert sorted(res.meta["chunks_rejected"]) == bad
    assert res.meta["chunks_computed"] == 5
    for name in bad:
        assert any(name in r.getMessage() for r in caplog.records), name
        assert (out / "rejected" / name).exists()
    reasons = " ".join(r.getMessage() for r in caplog.records)
    assert "another sweep" in reasons and "lacks metrics ['stable_rank']" in reasons
    assert_same(res, single)


@pytest.mark.slow
def test_orphan_temporary_files_are_removed(tmp_path, single):
    cfg, out = cfg_file(tmp_path), tmp_path / "run"
    simlab.run_sweep(cfg, out=out, quiet=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphans = [
        out / f".results.npz.{HOST}.{dead.pid}.k2j4x8q1.tmp",
        out / "chunks" / f".seed0_mb0-1.npz.{HOST}.{dead.pid}.a1b2c3d4.tmp",
    ]
    old = out / ".meta.json.q9w8e7r6.tmp"  # an older simlab's name: removed once stale
    live = out / f".results.npz.{HOST}.{os.getpid()}.zzzzzzzz.tmp"  # a live writer's: kept
    for p in (*orphans, old, live):
        p.write_bytes(b"partial")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    res = simlab.run_sweep(cfg, out=out, quiet=True)  # finished: loads, and cleans
    assert_same(res, single)
    assert not any(p.exists() for p in (*orphans, old)) and live.exists()


@pytest.mark.slow
def test_multi_device_stable_rank_sweep_finishes():
    """The sweep that hung with LAPACK under shard_map on 2 CPU devices (docs/performance.md):
    five runs in a row must all finish, with the same numbers as one device."""
    cfg = dict(
        block=dict(kind="post_ln", d_model=64, n_heads=4, mlp_ratio=2),
        inputs=dict(kind="gaussian", batch=4, length=64),
        axes=[
            dict(name="drift_norm", values=[0.0, 0.5, 2.0, 8.0]),
            dict(name="temperature", values=[0.5, 1.0, 2.0]),
        ],
        sweep=dict(seeds=2, micro_batch=2, chunk_size=4, metrics=["stable_rank", "out_cos"]),
    )
    got = {
        devices: np.asarray(
            [
                simlab.run_sweep(cfg, out=None, quiet=True, devices=devices).metrics["stable_rank"]
                for _ in range(5 if devices > 1 else 1)
            ]
        )
        for devices in (2, 1)
    }
    np.testing.assert_array_equal(got[2], np.broadcast_to(got[1], got[2].shape))
