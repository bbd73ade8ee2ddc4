"""What a config sets and the run would silently ignore or bound is said: a corpus that is not
UTF-8 text is refused naming the file and the byte; a corpus folder's non-UTF-8 files are left
out with a warning giving their count and the first; a corpus given to an input kind that does
not read one is refused; a checkpoint run beyond the positions it was trained on, or a
covariance measure of fewer tokens than dimensions, is warned about naming the field and the
bound (simlab.engine.cautions), before anything is computed."""

from __future__ import annotations

import pathlib
import warnings

import pytest

from simlab.checkpoints import corpus
from simlab.cli import main
from simlab.engine import plain
from simlab.engine.config import load_config
from simlab.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]
LLAMA = ROOT / "tests" / "fixtures" / "checkpoints" / "llama"
TEXT = "the value of a knob is the scale of the queries and the keys\n"


def prepared(tables: dict) -> list[str]:
    """The warnings of validating and preparing `tables` (nothing computed)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain.prepare(load_config(tables), quiet=True)
    return [str(w.message) for w in caught]


def gaussian(batch: int, length: int, d: int, metrics: list[str]) -> dict:
    return {
        "block": {"kind": "attention", "d_model": d, "n_heads": 2, "mlp": False},
        "inputs": {"kind": "gaussian", "batch": batch, "length": length},
        "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}],
        "sweep": {"seeds": 1, "metrics": metrics},
    }


@pytest.mark.parametrize(
    "data, offset",
    [
        pytest.param((TEXT * 3).encode("utf-16"), 0, id="utf16"),  # its byte-order mark
        pytest.param(TEXT.encode() + b"\x80A", len(TEXT.encode()), id="stray-byte"),
    ],
)
def test_a_corpus_file_that_is_not_utf8_is_refused_naming_the_file_and_the_byte(
    tmp_path, data, offset
):
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as e:
        corpus.text(str(path))
    msg = str(e.value)
    assert msg.startswith("inputs.corpus: ") and str(path) in msg and "\n" not in msg
    assert f"is not UTF-8 text (byte {offset}:" in msg
    path.write_bytes(TEXT.encode())  # the same file as UTF-8: read as it is
    assert corpus.text(str(path)) == TEXT


def test_a_corpus_folders_non_utf8_files_are_counted_in_a_warning(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "b.bin").write_bytes(bytes(range(256)))
    (tmp_path / "c.txt").write_bytes(TEXT.encode("utf-16"))
    (tmp_path / "d.txt").write_text(TEXT.upper())
    with pytest.warns(UserWarning) as caught:
        got = corpus.text(str(tmp_path))
    assert got == TEXT + corpus.JOIN + TEXT.upper()
    (msg,) = [str(w.message) for w in caught]
    assert msg.startswith("inputs.corpus: 2 of 4 files in ") and str(tmp_path) in msg
    assert "not UTF-8 text" in msg and "(the first: 'b.bin')" in msg
    for f in ("b.bin", "c.txt"):
        (tmp_path / f).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every file UTF-8: nothing said
        assert corpus.text(str(tmp_path)) == got


@pytest.mark.parametrize("kind", ["tokens", "gaussian"])
def test_a_corpus_given_to_a_kind_that_reads_none_is_refused(tmp_path, capsys, kind):
    (tmp_path / "c.txt").write_text(TEXT * 40)
    tables = gaussian(2, 4, 8, ["out_cos"])
    tables["inputs"] |= {"kind": kind, "corpus": str(tmp_path / "c.txt")}
    if kind == "tokens":
        tables["block"] = {}
        tables["checkpoint"] = {"path": str(LLAMA), "layer": 1}
        tables["inputs"]["vocab"] = 100
    with pytest.raises(ConfigError) as e:
        load_config(tables)
    msg = str(e.value)
    assert msg.startswith("inputs.corpus: ") and "\n" not in msg
    assert f"read only by inputs.kind 'text', not {kind!r}" in msg
    tables["inputs"].pop("corpus")
    load_config(tables)  # without the corpus: accepted
    # the command line: exit 2, one line naming the field, nothing written
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[inputs]\nkind = "{kind}"\ncorpus = "c.txt"\n')
    out = tmp_path / "run"
    code = main(["sweep", str(cfg), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("simlab: error: inputs.corpus: ") and "\n" not in err
    assert not out.exists()


def test_a_checkpoint_beyond_its_trained_positions_is_warned_about():
    """The Llama fixture's max_position_embeddings is 32; rotary positions run at any length
    (extrapolation is an experiment), so 40 is accepted with a warning and 32 without."""
    tables = {
        "checkpoint": {"path": str(LLAMA), "layer": 1},
        "inputs": {"kind": "tokens", "batch": 2, "length": 40, "vocab": 100},
        "axes": [{"name": "q_scale", "values": [1.0, 2.0]}],
        "sweep": {"seeds": 1, "metrics": ["out_cos"]},
    }
    (msg,) = prepared(tables)
    assert msg.startswith("inputs.length: 40 tokens exceed the 32 positions ")
    assert str(LLAMA / "config.json") in msg and "max_position_embeddings" in msg
    tables["inputs"]["length"] = 32
    assert prepared(tables) == []


def test_covariance_measures_of_fewer_tokens_than_dimensions_are_warned_about():
    """n = B*T tokens have a centred covariance of rank at most n - 1: at n <= d the measures
    of it are bounded by n, and the warning names them, n and d; at n > d, or for measures
    that are no covariance's, nothing is said."""
    asked = ["out_cos", "input_participation_ratio", "out_isoscore"]
    (msg,) = prepared(gaussian(2, 4, 64, asked))
    assert msg.startswith("sweep.metrics: input_participation_ratio, out_isoscore measure ")
    assert "n = 8 tokens" in msg and "d = 64" in msg and "at most n - 1 = 7" in msg
    assert prepared(gaussian(2, 4, 64, ["out_cos", "attn_entropy"])) == []
    assert prepared(gaussian(2, 40, 64, asked)) == []
    (msg,) = prepared(gaussian(2, 32, 64, asked))  # n = d: rank d - 1 at most
    assert "n = 64 tokens" in msg
