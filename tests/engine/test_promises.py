"""Promises kept under interrupts, full disks, other precisions and odd paths: each case ends in
one line naming the path (exit 2 for a user error, 1 for a storage failure, 130 for Ctrl-C),
with nothing half-written, and what was saved reused by the next run."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.core.block import BLOCKS
from simlab.engine import records
from simlab.errors import ConfigError, Interrupted, StorageError

ROOT = Path(__file__).resolve().parents[2]


def tiny(kind="post_ln", **sweep):
    return dict(
        block=dict(kind=kind, d_model=8, n_heads=2, mlp_ratio=1),
        inputs=dict(kind="gaussian", batch=2, length=4),
        axes=[dict(name="drift_norm", values=[0.0, 0.5, 1.0, 2.0, 4.0, 8.0])],
        sweep=dict(seeds=1, micro_batch=1, chunk_size=1, **sweep),
    )


class Stop(Exception):
    pass


def stop_after(n):
    calls = []

    def hook(info):
        calls.append(info)
        if len(calls) == n:
            raise KeyboardInterrupt

    return hook


# ------------------------------------------------------------------------------ precision
# A declared sample of the block kinds (it was every kind: one float64 sweep compiled per kind):
# the refusal is the engine's (meta.json and the fingerprint), not a kind's; the default kind
# and the one furthest from it (RMSNorm, gated MLP, rotary, grouped-query attention). That
# every kind really computes in float64 is test_conformance.py's (assert_really_float64 on
# cases covering every kind) and tests/core/test_numerics.py's.
PRECISION_KINDS = ("post_ln", "llama")


@pytest.mark.slow
@pytest.mark.parametrize("kind", PRECISION_KINDS)
def test_resume_under_another_precision_is_refused(kind, tmp_path):
    """A sweep interrupted under float64 is not resumed (nor merged) in float32: the precision
    is in meta.json and the fingerprint, and the refusal names it."""
    assert kind in BLOCKS
    out = tmp_path / "run"
    with jax.enable_x64(True), pytest.raises(Interrupted):
        simlab.run_sweep(tiny(kind), out=out, quiet=True, on_chunk=stop_after(2))
    with pytest.raises(ConfigError, match=r"differs in: sweep.dtype"):
        simlab.run_sweep(tiny(kind), out=out, quiet=True)
    with jax.enable_x64(True):
        res = simlab.run_sweep(tiny(kind), out=out, quiet=True)  # same precision: resumes
    assert res.meta["dtype"] == "float64" and res.meta["chunks_reused"] == 2
    assert res["out_cos"].dtype == np.float64
    with pytest.raises(ConfigError, match=r"sweep.dtype: 'float64', but this process computes"):
        simlab.run_sweep({**tiny(kind), "sweep": {"dtype": "float64"}}, quiet=True)


# ------------------------------------------------------------------------------ interrupts
@pytest.mark.slow
def test_interrupt_keeps_the_chunks_and_leaves_no_lock(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(Interrupted) as e:
        simlab.run_sweep(tiny(), out=out, quiet=True, on_chunk=stop_after(3))
    assert e.value.message == (
        f"3 chunk files (3 of 6 points) saved in {out}; run the same command to resume"
    )
    assert not (out / ".lock").exists() and not (out / "claims").exists()
    assert len(list((out / "chunks").glob("*.npz"))) == 3
    res = simlab.run_sweep(tiny(), out=out, quiet=True)
    assert res.meta["chunks_reused"] == 3 and res.meta["chunks_computed"] == 3
    np.testing.assert_array_equal(res["out_cos"], simlab.run_sweep(tiny(), quiet=True)["out_cos"])


# one point per chunk file, ~5 ms each once compiled (and compiling is cached across tests): the
# test interrupts at the first chunk file, so the run must outlast the polling by far
# one point per chunk file: the run outlasts the polling for its first chunk file by far (the
# other 199 chunks, each a compiled call and a file), and its resume is short
SLOW_SWEEP = (
    '[block]\nd_model = 8\nn_heads = 2\n[inputs]\nkind = "gaussian"\nbatch = 2\n'
    'length = 4\n[[axes]]\nname = "drift_norm"\nspace = "lin"\nstart = 0.0\nstop = 1.0\n'
    "num = 200\n[sweep]\nmicro_batch = 1\nchunk_size = 1\n"
)


def test_an_interrupt_between_writing_and_recording_a_claim_leaves_no_trace(tmp_path):
    """A claim file this process wrote but had not recorded yet (an interrupt in between) is
    its own: leaving removes it, the claims folder and the lock, as for a recorded one; a live
    claim of another writer still keeps them."""
    from simlab.engine import claims

    coord = claims.Coordinator(tmp_path)
    with coord.lock():
        pass
    coord.claims_dir.mkdir()
    (coord.claims_dir / f"seed0_mb0-1.{claims.HOST}.{os.getpid()}.claim").write_text("0\n")
    coord.leave()
    assert not (tmp_path / ".lock").exists() and not coord.claims_dir.exists()
    with coord.lock():
        pass
    coord.claims_dir.mkdir()
    other = coord.claims_dir / f"seed0_mb0-1.{claims.HOST}.{os.getppid()}.claim"
    other.write_text("0\n")
    coord.leave()
    assert other.exists() and (tmp_path / ".lock").exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_ctrl_c_on_the_command_line(tmp_path, command):
    """SIGINT to `simlab sweep` or `simlab reproduce`: exit 130 with one line saying what was
    saved; the same command then says what it reuses and finishes."""
    env = dict(os.environ)
    if command == "sweep":
        cfg = tmp_path / "c.toml"
        cfg.write_text(SLOW_SWEEP)
        out = tmp_path / "run"
        cmd = [sys.executable, "-m", "simlab", "sweep", str(cfg), "--out", str(out), "--quiet"]
    else:
        exp = tmp_path / "exp"
        exp.mkdir()
        figure = '[[figures]]\nkind = "curves"\nx = "drift_norm"\nmetrics = ["out_cos"]\n'
        (exp / "slow.toml").write_text(SLOW_SWEEP + figure)
        env["SIMLAB_EXPERIMENTS"] = str(exp)
        out = tmp_path / "figs" / "data" / "slow"
        cmd = [sys.executable, "-m", "simlab", "reproduce", "--out", str(tmp_path / "figs")]
        cmd += ["--quiet"]
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a job started in the background (`... &`) inherits SIGINT ignored: give it back its
        # default, as an interactive shell would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while time.time() < deadline and not any((out / "chunks").glob("*.npz")):
        time.sleep(0.01)
    assert p.poll() is None, "the sweep finished before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("simlab: interrupted:")]
    assert f"saved in {out}; run the same command to resume" in line
    assert not (out / ".lock").exists() and not (out / "claims").exists()
    r = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and f"resuming {out}: " in r.stderr, r.stderr  # (not --quiet)
    assert simlab.load(out)["out_cos"].shape == (200, 1)


# ------------------------------------------------------------------------------ storage
@pytest.mark.slow
def test_disk_full_during_a_sweep_is_one_line_and_resumable(tmp_path, monkeypatch, capsys):
    """A write that fails (ENOSPC) stops the sweep with exit 1 and one line naming the file
    and what was saved; no temporary file is left; the next run resumes."""
    out = tmp_path / "run"
    real = os.fsync
    calls = []

    def full(fd):
        calls.append(fd)
        if len(calls) == 3:  # the third chunk file does not fit
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", full)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[block]\nd_model = 8\nn_heads = 2\n[inputs]\nkind = "gaussian"\nbatch = 2\n'
        'length = 4\n[[axes]]\nname = "drift_norm"\nvalues = [0.0, 1.0, 2.0, 3.0]\n'
        "[sweep]\nmicro_batch = 1\nchunk_size = 1\n"
    )
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and str(out) in err[0]
    assert "2 chunk files (2 of 4 points) saved in" in err[0]
    assert not [p for p in out.rglob("*.tmp")]
    monkeypatch.setattr(os, "fsync", real)
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0


def test_atomic_write_failure_leaves_nothing(tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StorageError, match=r"x.bin: cannot be written \(No space left"):
        records.atomic_write_bytes(tmp_path / "x.bin", b"data")
    assert list(tmp_path.iterdir()) == []


def test_real_tiny_tmpfs_if_it_can_be_mounted(tmp_path):
    """A 64 KiB tmpfs (only where this user may mount one): a sweep whose results do not fit
    exits 1 with one line and leaves no temporary file."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        cfg = dict(tiny(), axes=[dict(name="drift_norm", space="lin", start=0, stop=1, num=300)])
        with pytest.raises(StorageError, match="No space left on device"):
            simlab.run_sweep(cfg, out=mnt / "run", quiet=True)
        assert not list(mnt.rglob("*.tmp"))
    finally:
        subprocess.run(["umount", str(mnt)])


# ------------------------------------------------------------------------------ paths
@pytest.mark.parametrize(
    "make,message",
    [
        (lambda t: t / ("x" * 300), "is 300 bytes long; this file system allows 255"),
        (lambda t: t / "/".join(["d" * 200] * 22), "the path is"),
        (lambda t: _dangling(t), "is a symbolic link to"),
    ],
)
def test_bad_out_paths_are_refused_before_any_compute(tmp_path, capsys, make, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[axes]]\nname = "drift_norm"\nvalues = [1.0]\n')
    out = make(tmp_path)
    assert main(["sweep", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simlab: error: --out: ") and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) in (["c.toml"], ["c.toml", "link"])


def _dangling(t):
    (t / "link").symlink_to(t / "nowhere")
    return t / "link"


def test_info_into_a_closed_pipe(tmp_path):
    """`simlab info DIR | head -1`: no BrokenPipeError traceback."""
    paper = ROOT / "figures" / "data" / "paper"
    r = subprocess.run(
        f"{sys.executable} -m simlab info {paper} --config | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.startswith("simlab Results") and r.stderr == "", r.stderr


# ------------------------------------------------------------------------------ messages
def test_merge_on_a_finished_directory_says_nothing_was_computed(tmp_path, capsys):
    out = tmp_path / "run"
    simlab.run_sweep(tiny(), out=out, quiet=True)
    assert main(["merge", str(out), "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "already finished; nothing computed" in said and "computed now" not in said


def test_results_of_another_version_are_read_with_a_warning(tmp_path, capsys):
    import json

    out = tmp_path / "run"
    simlab.run_sweep(tiny(), out=out, quiet=True)
    meta = json.loads((out / "meta.json").read_text())
    meta["versions"]["simlab"] = "9.9.9"
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=r"written by simlab 9.9.9; this is simlab"):
        simlab.load(out)
    meta["config"]["block"]["future_field"] = 1
    (out / "meta.json").write_text(json.dumps(meta))
    assert main(["info", str(out)]) == 0
    err = capsys.readouterr().err
    assert "simlab: warning: " in err and "does not know: block.future_field" in err


def test_an_unusable_compile_cache_is_one_warning(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SIMLAB_COMPILE_CACHE", str(blocker / "cache"))
    from simlab.engine import compile_cache

    compile_cache._WARNED.clear()
    res = simlab.run_sweep(tiny(), quiet=True)
    assert res["out_cos"].shape == (6, 1)
    err = capsys.readouterr().err
    assert err.count("simlab: warning: compilation cache") == 1 and "is unusable" in err
    compile_cache.disable()


def test_python_api_takes_arrays_and_selects_any_axis_name(tmp_path):
    pytest.importorskip("xarray")
    cfg = dict(
        tiny(),
        axes=[dict(name="lambda", knobs=["q_scale", "k_scale"], values=np.geomspace(0.5, 8.0, 5))],
    )
    res = simlab.run_sweep(cfg, quiet=True)
    np.testing.assert_allclose(res.axes["lambda"], np.geomspace(0.5, 8.0, 5))
    ds = res.sel({"lambda": 2.0})  # `lambda` is a Python keyword: a dict selects it
    assert float(ds["lambda"]) == pytest.approx(2.0)
    with pytest.raises(KeyError, match=r"sel: \['nope'\] are not axes"):
        res.sel(nope=1)


def test_export_refuses_non_ascii_names_and_a_missing_folder(tmp_path, capsys):
    pytest.importorskip("xarray")
    out = tmp_path / "run"
    simlab.run_sweep(
        dict(tiny(), axes=[dict(name="λ", knobs=["q_scale"], values=[1.0, 2.0])]),
        out=out,
        quiet=True,
    )
    assert main(["export", str(out), "--to", str(tmp_path / "x.nc")]) == 2
    assert "ASCII names only, and ['λ'] are not" in capsys.readouterr().err
    assert main(["export", str(out), "--to", str(tmp_path / "nodir" / "x.nc")]) == 2
    err = capsys.readouterr().err
    assert f"the folder {tmp_path / 'nodir'} does not exist" in err and ".tmp" not in err
    assert not (tmp_path / "x.nc").exists()


def test_info_config_is_toml_that_sweep_reads_back(tmp_path, capsys):
    out = tmp_path / "run"
    simlab.run_sweep(tiny(), out=out, quiet=True)
    assert main(["info", str(out), "--config"]) == 0
    text = capsys.readouterr().out.split("reads it back)\n", 1)[1]
    (tmp_path / "again.toml").write_text(text)
    again = tmp_path / "again"
    assert main(["sweep", str(tmp_path / "again.toml"), "--out", str(again), "--quiet"]) == 0
    assert simlab.load(again).meta["fingerprint"] == simlab.load(out).meta["fingerprint"]


@pytest.mark.slow
def test_bench_without_torch_runs_what_it_can(monkeypatch, tmp_path):
    from simlab.studies import bench

    monkeypatch.setattr(bench, "_has_torch", lambda: False)
    said = []
    report, _ = bench.run_bench(
        ["P5"], quick=True, isolate=False, out_dir=None, peak_n=64, log=said.append, rounds=1
    )
    assert any("PyTorch is not installed" in s and "pip install" in s for s in said)
    (w,) = report["workloads"]
    assert w["torch"] is None and w["engine_cold"]["wall_s"] > 0


def test_plot_into_a_full_disk_or_an_unwritable_results_directory(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    simlab.run_sweep(tiny(), out=out, quiet=True)
    argv = ["plot", str(out), "--x", "drift_norm", "--metric", "out_cos"]

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", no_space)
        assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out_cos_drift_norm.png: cannot be written" in err[0]
    assert not list(out.glob("*.png")) and not list(out.glob(".*tmp"))
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == out else real(p, mode))
    assert main(argv) == 2
    assert "--out (default: the results directory): " in capsys.readouterr().err
