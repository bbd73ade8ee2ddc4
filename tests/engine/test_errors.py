"""Every user error a new user can make ends the same way: exit code 2, one line
"simlab: error: <message>" naming the file or field and what is allowed, no traceback, nothing
written; the Python API raises ConfigError (ResultsError for unreadable results) with the same
message. One test per case."""

from __future__ import annotations

import json
import os
import shutil
import tomllib

import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.engine import store
from simlab.engine.config import load_config
from simlab.errors import ConfigError, ResultsError

TINY = """
[block]
kind = "attention"
d_model = 8
n_heads = 2
mlp = false
[inputs]
kind = "gaussian"
batch = 2
length = 4
[[axes]]
name = "drift_norm"
values = [0.0, 1.0]
[sweep]
seeds = 1
"""


def cli(capsys, *argv) -> str:
    """Run `simlab ARGV...`; assert exit 2 with one error line and no traceback; the message."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("simlab: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def config(tmp_path, text=TINY, name="cfg.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def listing(d):
    return sorted(p.relative_to(d) for p in d.rglob("*")) if d.exists() else None


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny sweep directory (copied by tests that corrupt it)."""
    d = tmp_path_factory.mktemp("done") / "run"
    simlab.run_sweep(load_config_text(TINY), out=d, quiet=True)
    return d


def load_config_text(text):
    return tomllib.loads(text)


def copy_of(src, dst):
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------- config files
def test_non_utf8_config(tmp_path, capsys):
    p = tmp_path / "latin1.toml"
    p.write_bytes("# caf\xe9\n".encode("latin-1") + TINY.encode())
    err = cli(capsys, "sweep", p, "--out", tmp_path / "out")
    assert "latin1.toml: is not UTF-8 text" in err
    assert not (tmp_path / "out").exists()


def test_binary_config(tmp_path, capsys):
    p = tmp_path / "blob.toml"
    p.write_bytes(bytes(range(256)))
    err = cli(capsys, "sweep", p, "--out", tmp_path / "out")
    assert "blob.toml: is not UTF-8 text" in err
    assert not (tmp_path / "out").exists()


def test_config_is_a_directory(tmp_path, capsys):
    err = cli(capsys, "sweep", tmp_path, "--out", tmp_path / "out")
    assert "is not a file" in err


def test_block_false(tmp_path, capsys):
    p = config(tmp_path, "block = false\n" + _without(TINY, "block"))
    with pytest.raises(ConfigError, match="block: must be a table, got False"):
        load_config(p)
    err = cli(capsys, "sweep", p, "--out", tmp_path / "out")
    assert "block: must be a table, got False" in err
    assert not (tmp_path / "out").exists()


def _without(text, table):
    """TINY without one [table] (its header and fields)."""
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("["):
            skip = line.strip("[]") == table
        if not skip:
            out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------- axes, sweep
def test_axis_num_huge(tmp_path, capsys):
    text = TINY.replace(
        "values = [0.0, 1.0]", 'space = "lin"\nstart = 0.0\nstop = 1.0\nnum = 1000000000000'
    )
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert "axes[0].num: 1000000000000 is outside the allowed range [1, 1048576]" in err
    assert not (tmp_path / "out").exists()


def test_seeds_huge(tmp_path, capsys):
    text = TINY.replace("seeds = 1", "seeds = 1000000000000")
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert "sweep.seeds: 1000000000000 is outside the allowed range" in err


def test_too_large_for_memory(tmp_path, capsys):
    """A block whose seed state alone (a 2^24 x 65536 embedding table, 4 PiB) cannot fit: the
    preflight refuses it before anything is computed or written, naming the fields."""
    text = TINY.replace('kind = "gaussian"', 'kind = "embedding"\nvocab = 16777216')
    text = text.replace("d_model = 8", "d_model = 65536")
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert err.startswith("simlab: error: memory: this sweep needs")
    assert "inputs.vocab = 16777216" in err and "block.d_model = 65536" in err
    assert not (tmp_path / "out").exists()


def test_results_too_large_for_memory(tmp_path):
    """Many seeds x a long grid: the results arrays alone exceed the machine (API: ConfigError)."""
    text = TINY.replace("seeds = 1", "seeds = 1048576").replace(
        "values = [0.0, 1.0]", 'space = "lin"\nstart = 0.0\nstop = 1.0\nnum = 1048576'
    )
    with pytest.raises(ConfigError, match=r"results .* sweep.seeds = 1048576"):
        simlab.run_sweep(config(tmp_path, text), out=tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()


def test_duplicate_axis_values(tmp_path, capsys):
    text = TINY.replace("values = [0.0, 1.0]", "values = [0.0, 1.0, 1.0]")
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert "axes[0]: the value 1 appears more than once" in err


def test_lin_axis_start_equals_stop(tmp_path, capsys):
    text = TINY.replace("values = [0.0, 1.0]", 'space = "lin"\nstart = 1.0\nstop = 1.0\nnum = 3')
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert "appears more than once" in err and "start != stop" in err


def test_one_point_needs_start_equal_stop(tmp_path, capsys):
    text = TINY.replace("values = [0.0, 1.0]", 'space = "log"\nstart = 1.0\nstop = 10.0\nnum = 1')
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert "axes[0].num: 1 point needs start == stop" in err
    one = TINY.replace("values = [0.0, 1.0]", 'space = "log"\nstart = 2.0\nstop = 2.0\nnum = 1')
    assert load_config(config(tmp_path, one, "one.toml")).axes[0].values == (2.0,)


@pytest.mark.slow
def test_descending_axis_is_kept_in_order(tmp_path):
    """Descending axes are accepted and keep their order (documented in docs/config.md)."""
    text = TINY.replace("values = [0.0, 1.0]", 'space = "log"\nstart = 100.0\nstop = 1.0\nnum = 3')
    res = simlab.run_sweep(config(tmp_path, text), out=None, quiet=True)
    np.testing.assert_allclose(res.axes["drift_norm"], [100.0, 10.0, 1.0])


@pytest.mark.parametrize("name", ["seed", "layer"])
def test_axis_named_like_a_results_dimension(tmp_path, capsys, name):
    text = TINY.replace('name = "drift_norm"', f'name = "{name}"\nknobs = ["drift_norm"]')
    err = cli(capsys, "sweep", config(tmp_path, text), "--out", tmp_path / "out")
    assert f"axes[0].name: '{name}' is reserved" in err


def test_run_sweep_of_a_number():
    with pytest.raises(ConfigError, match="config: must be a TOML path, a dict of tables"):
        simlab.run_sweep(123, out=None)


# ------------------------------------------------------------------------------- --out
def test_out_empty(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = cli(capsys, "sweep", config(tmp_path), "--out", "")
    assert "--out: empty path" in err
    assert listing(tmp_path) == [config(tmp_path).relative_to(tmp_path)]
    with pytest.raises(ConfigError, match="--out: empty path"):
        simlab.run_sweep(config(tmp_path), out="", quiet=True)


def test_out_below_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    err = cli(capsys, "sweep", config(tmp_path), "--out", tmp_path / "file" / "run")
    assert "lies below" in err and "which is a file" in err


def test_out_is_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    err = cli(capsys, "sweep", config(tmp_path), "--out", tmp_path / "file")
    assert "exists and is not a directory" in err


def test_out_not_writable(tmp_path, capsys, monkeypatch):
    """Decided by os.access (so that it holds for root too, who may write anywhere, the check
    is exercised by making os.access refuse); nothing written."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(
        store.os, "access", lambda p, mode: False if str(p) == str(locked) else real(p, mode)
    )
    err = cli(capsys, "sweep", config(tmp_path), "--out", locked / "run")
    assert f"{locked} is not writable by this user" in err
    assert listing(locked) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_out_read_only_directory(tmp_path, capsys):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        err = cli(capsys, "sweep", config(tmp_path), "--out", locked / "run")
        assert "is not writable" in err
    finally:
        locked.chmod(0o700)


# ------------------------------------------------------------------------------- corrupt files
@pytest.mark.parametrize("how", ["truncated", "empty", "garbage"])
def test_corrupt_results_npz(finished, tmp_path, capsys, how):
    d = copy_of(finished, tmp_path / "run")
    data = (d / "results.npz").read_bytes()
    (d / "results.npz").write_bytes(
        {"truncated": data[: len(data) // 2], "empty": b"", "garbage": os.urandom(512)}[how]
    )
    before = listing(d)
    with pytest.raises(ResultsError, match="results.npz: cannot be read"):
        simlab.load(d)
    err = cli(capsys, "plot", d, "--x", "drift_norm", "--metric", "out_cos")
    assert "results.npz: cannot be read" in err
    err = cli(capsys, "sweep", config(tmp_path), "--out", d)  # the re-run reloads it
    assert "results.npz: cannot be read" in err
    assert listing(d) == before


def test_results_npz_of_something_else(finished, tmp_path):
    d = copy_of(finished, tmp_path / "run")
    np.savez(d / "results.npz", out_cos=np.zeros(3))
    with pytest.raises(ResultsError, match="holds no axes or no metrics"):
        simlab.load(d)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\xff\xfe"])
def test_corrupt_meta_json(finished, tmp_path, capsys, text):
    d = copy_of(finished, tmp_path / "run")
    (d / "meta.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ResultsError, match="meta.json: "):
        simlab.load(d)
    err = cli(capsys, "plot", d, "--x", "drift_norm", "--metric", "out_cos")
    assert "meta.json" in err


@pytest.mark.parametrize("text", ["{not json", '{"config": {}}'])
def test_corrupt_sweep_json_on_rerun(finished, tmp_path, capsys, text):
    d = copy_of(finished, tmp_path / "run")
    (d / "sweep.json").write_text(text)
    before = listing(d)
    err = cli(capsys, "sweep", config(tmp_path), "--out", d)
    assert "sweep.json" in err
    assert listing(d) == before
    json.loads((finished / "sweep.json").read_text())  # the original is untouched


# ------------------------------------------------------------------------------- other commands
def test_check_theory_config_dir_missing(tmp_path, capsys):
    err = cli(
        capsys,
        "check-theory",
        "--quick",
        "--config-dir",
        tmp_path / "nope",
        "--figures-dir",
        tmp_path / "figs",
    )
    assert "--config-dir" in err and "is not a directory" in err
    assert not (tmp_path / "figs").exists()


def test_check_theory_config_dir_without_a_claim_file(tmp_path, capsys):
    """Every claim's file is read before the first simulation: nothing runs, nothing written."""
    (tmp_path / "cfgs").mkdir()
    err = cli(
        capsys,
        "check-theory",
        "--quick",
        "--config-dir",
        tmp_path / "cfgs",
        "--figures-dir",
        tmp_path / "figs",
    )
    assert "theory_rem_entropy.toml: no such config file" in err
    assert not (tmp_path / "figs").exists()


@pytest.mark.parametrize("flag", ["--repeats", "--rounds"])
def test_bench_repeats_zero(tmp_path, capsys, flag):
    err = cli(capsys, "bench", "--quick", flag, "0", "--out-dir", tmp_path / "bench")
    assert f"bench {flag}: 0 must be >= 1" in err
    assert not (tmp_path / "bench").exists()


def test_reproduce_out_below_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    err = cli(capsys, "reproduce", "--quick", "--only", "paper", "--out", tmp_path / "file" / "f")
    assert "lies below" in err


def test_plot_out_empty(finished, capsys):
    err = cli(capsys, "plot", finished, "--x", "drift_norm", "--metric", "out_cos", "--out", "")
    assert "--out: '' must name a figure file" in err


def test_missing_config_file(tmp_path, capsys):
    err = cli(capsys, "sweep", tmp_path / "missing.toml", "--out", tmp_path / "out")
    assert "missing.toml: no such config file" in err
    with pytest.raises(ConfigError, match="missing.toml: no such config file"):
        load_config(tmp_path / "missing.toml")
