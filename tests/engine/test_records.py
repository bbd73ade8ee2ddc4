"""The on-disk records (simlab.engine.records): directories of the last released layout read,
resumed and grown; one meta.json for plain and composite sweeps; a newer schema refused; the
fingerprint rule checked for every field and knob and against every committed fingerprint; a
training run's config recognised as one."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from simlab.core.knobs import KNOBS
from simlab.engine import config as cfgmod
from simlab.engine import records, results
from simlab.engine.sweep import run_sweep
from simlab.errors import ResultsError

REPO = Path(__file__).resolve().parents[2]
LAYOUT_1 = REPO / "tests" / "fixtures" / "layout-1"


def _layout_1():
    spec = importlib.util.spec_from_file_location("layout_1_make", LAYOUT_1 / "make.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def layout_1(tmp_path):
    """A writable copy of the layout-1 directories and the configs that wrote them."""
    shutil.copytree(LAYOUT_1, tmp_path / "layout-1")
    return tmp_path / "layout-1", _layout_1()


def _no_warnings(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*a, **kw)


def test_layout_1_is_version_1():
    """The fixture is what it claims: records without a schema key."""
    for p in LAYOUT_1.rglob("*.json"):
        assert "schema" not in json.loads(p.read_text()), p


def test_layout_1_plain_loads_and_is_not_recomputed(layout_1):
    """A version-1 plain directory loads as it is, and running its config again finds it
    finished (no chunk computed, the same numbers) instead of refusing or recomputing it."""
    d, mk = layout_1
    old = results.load(d / "plain")
    assert old.meta["fingerprint"] == cfgmod.fingerprint(old.meta["config"], 1)
    chunks = []
    again = run_sweep(**mk.PLAIN, out=d / "plain", quiet=True, on_chunk=chunks.append)
    assert chunks == []
    for k in old.metrics:
        np.testing.assert_array_equal(again[k], old[k])


def test_layout_1_grown_loads_and_grows_reusing_its_parts(layout_1):
    """A version-1 composite directory loads; growing it once more computes only the new pairs
    and gives, on the old pairs, the numbers the old parts hold."""
    d, mk = layout_1
    old = results.load(d / "grown")
    assert old.meta["parts"] and "history" in old.meta
    chunks = []
    res = run_sweep(**mk.GROWN, out=d / "grown", quiet=True, on_chunk=chunks.append)
    assert chunks == []  # finished: loaded
    bigger = {**mk.GROWN, "axes": [{"name": "drift_norm", "values": [0.0, 0.25, 0.5, 1.0, 2.0]}]}
    grown = run_sweep(**bigger, out=d / "grown", quiet=True, on_chunk=chunks.append)
    assert sum(c.points for c in chunks) == 3  # one new point x 3 seeds
    for k in res.metrics:
        np.testing.assert_array_equal(grown[k][:4], res[k])
    state = json.loads((d / "grown" / "sweep.json").read_text())
    assert state["schema"] == records.SCHEMA
    assert state["history"][-1]["pairs_computed"] == 3
    assert state["history"][-1]["pairs_reused"] == 12


def test_plain_and_composite_meta_share_one_record(tmp_path, layout_1):
    """meta.json of a plain and of a grown sweep come from one function: the same keys but the
    layout (plain) and the parts and history (composite), the same dtype source, points per
    second and rejected chunks in both."""
    d, mk = layout_1
    plain = run_sweep(**mk.PLAIN, out=tmp_path / "p", quiet=True).meta
    run_sweep(**mk.PLAIN, out=tmp_path / "g", quiet=True)
    grown = run_sweep(**mk.GROWN, out=tmp_path / "g", quiet=True).meta
    assert set(plain) - {"layout"} == set(grown) - {"parts", "history"}
    for meta in (plain, grown):
        assert meta["schema"] == records.SCHEMA
        assert meta["dtype"] == meta["config"]["sweep"]["dtype"] == "float32"
        assert meta["points_per_second"] > 0
        assert meta["chunks_rejected"] == []
    assert grown["points_computed"] == 4 * 3 - 3 * 2  # the pairs the first sweep did not hold


def test_newer_schema_refused(tmp_path, layout_1):
    """A record of a schema newer than this simlab reads is refused, naming the file."""
    d, _ = layout_1
    meta = json.loads((d / "plain" / "meta.json").read_text())
    (d / "plain" / "meta.json").write_text(json.dumps({**meta, "schema": records.SCHEMA + 1}))
    with pytest.raises(ResultsError, match=r"plain/meta.json: schema \d+ is newer"):
        results.load(d / "plain")


@pytest.mark.parametrize("schema", ["2", 0, True, 1.5])
def test_a_schema_that_is_not_a_version_is_refused_as_such(layout_1, schema):
    """schema "2" (a string), 0, true or 1.5 is not called newer: it is not a schema version."""
    d, _ = layout_1
    meta = json.loads((d / "plain" / "meta.json").read_text())
    (d / "plain" / "meta.json").write_text(json.dumps({**meta, "schema": schema}))
    with pytest.raises(ResultsError, match=r"plain/meta.json: schema .* is not a schema version"):
        results.load(d / "plain")


def _committed_records() -> list[Path]:
    """Every committed sweep.json and meta.json under figures/ and tests/ (git's list when this
    is a checkout, else the files there)."""
    names = ("sweep.json", "meta.json")
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "figures", "tests"],
            cwd=REPO, capture_output=True, check=True,
        ).stdout.decode()  # fmt: skip
        files = [REPO / f for f in out.split("\0") if f.rsplit("/", 1)[-1] in names]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:
        files = [p for base in ("figures", "tests") for p in (REPO / base).rglob("*.json")]
    return sorted(p for p in files if p.name in names)


def test_every_committed_fingerprint_recomputes():
    """Every committed sweep.json and meta.json holding a fingerprint (figures/data,
    figures/quick/data, the fixtures under tests/) hashes to it under the rule it names (none
    names one: rule 1), by the rule's data alone; and simlab reads it without refusing it."""
    found = 0
    for p in _committed_records():
        rec = json.loads(p.read_text())
        if not (isinstance(rec, dict) and isinstance(rec.get("fingerprint"), str)):
            continue
        found += 1
        rule = rec.get(records.RULE_KEY, 1)
        assert rule in cfgmod.FINGERPRINT_RULES, p
        assert cfgmod.fingerprint(rec["config"], rule) == rec["fingerprint"], p
        records.check_fingerprint(p, records.read_json(p, "a committed record"))
    assert found >= 200
    assert cfgmod.FINGERPRINT_RULE in cfgmod.FINGERPRINT_RULES


def test_new_records_name_their_fingerprint_rule(tmp_path, layout_1):
    """sweep.json and meta.json of a new sweep, plain and composite, name the rule they were
    made under, and their fingerprint is that rule's; the layout-1 records name none and are
    read as rule 1."""
    d, mk = layout_1
    run_sweep(**mk.PLAIN, out=tmp_path / "p", quiet=True)
    run_sweep(**mk.PLAIN, out=tmp_path / "g", quiet=True)
    run_sweep(**mk.GROWN, out=tmp_path / "g", quiet=True)
    made = [tmp_path / "p", tmp_path / "g", tmp_path / "g" / "parts" / "1"]
    for rec_path in [x / name for x in made for name in ("sweep.json", "meta.json")]:
        rec = json.loads(rec_path.read_text())
        assert rec[records.RULE_KEY] == cfgmod.FINGERPRINT_RULE, rec_path
        assert cfgmod.fingerprint(rec["config"], rec[records.RULE_KEY]) == rec["fingerprint"]
    old = json.loads((d / "plain" / "sweep.json").read_text())
    assert records.RULE_KEY not in old
    assert records.record_rule(d / "plain" / "sweep.json", old) == 1


@pytest.mark.parametrize(
    "rule,message",
    [
        (99, r"made under fingerprint rule 99, which this simlab does not know"),
        ("1", r"fingerprint_rule '1' is not a fingerprint rule version"),
        (0, r"fingerprint_rule 0 is not a fingerprint rule version"),
    ],
)
def test_an_unknown_fingerprint_rule_is_refused_naming_the_file(layout_1, rule, message):
    """A record naming a rule this simlab does not know (a newer simlab's), or a value that is
    no rule version, is refused when read, naming the file, not called edited."""
    d, _ = layout_1
    _edit(d / "plain" / "meta.json", lambda r: r.update({records.RULE_KEY: rule}))
    with pytest.raises(ResultsError, match="plain/meta.json: " + message):
        results.load(d / "plain")


def test_a_fingerprint_is_checked_under_the_record_rule(layout_1):
    """A rule is data: rule 2 leaves out the fields rule 1 hashes at their default, so the
    same config has another fingerprint under it; a record naming rule 2 is checked under it
    (and refused under rule 1), while the records naming rule 1 (or none) still read."""
    d, _ = layout_1
    meta = json.loads((d / "plain" / "meta.json").read_text())
    fp1, fp2 = (cfgmod.fingerprint(meta["config"], r) for r in (1, 2))
    assert fp1 == meta["fingerprint"] != fp2
    assert meta["config"]["block"]["causal"] is False  # at its default
    assert "causal" in cfgmod.canonical(meta["config"], 1)["block"]
    assert "causal" not in cfgmod.canonical(meta["config"], 2)["block"]
    for name in ("sweep.json", "meta.json"):
        _edit(d / "plain" / name, lambda r: r.update({records.RULE_KEY: 2, "fingerprint": fp2}))
    assert results.load(d / "plain").meta["fingerprint"] == fp2
    records.read_sweep(d / "plain" / "sweep.json")
    _edit(d / "plain" / "meta.json", lambda r: r.update({records.RULE_KEY: 1}))
    with pytest.raises(ResultsError, match=r"meta.json: its config does not hash"):
        results.load(d / "plain")


def test_rule_2_hashes_only_the_fields_away_from_their_defaults():
    """Under rule 2 (the current one) every field and knob the canonical config keeps differs
    from its default, where rule 1 kept the 37 names of its "hashed_at_default" at their
    default too."""
    assert cfgmod.FINGERPRINT_RULE == 2
    d = _base_config()
    for rule in (1, 2):
        defaults = cfgmod.field_defaults(rule)
        hashed = cfgmod.FINGERPRINT_RULES[rule]["hashed_at_default"]
        canon = cfgmod.canonical(d, rule)
        at_default = {
            (table, k)
            for table in defaults
            for k, v in canon.get(table, {}).items()
            if k in defaults[table] and v == defaults[table][k]
        }
        assert at_default == {
            (t, k)
            for t, names in hashed.items()
            for k in names
            if k in d[t] and d[t][k] == defaults[t][k]  # (a knob on an axis: not in d["knobs"])
        }
    assert sum(len(v) for v in cfgmod.FINGERPRINT_RULES[1]["hashed_at_default"].values()) == 37
    assert cfgmod.FINGERPRINT_RULES[2]["hashed_at_default"] == {}


def test_a_field_added_later_leaves_a_rule_2_fingerprint_alone(monkeypatch):
    """A [sweep] field added with a default after a record was made: a config that holds it at
    its default hashes (rule 2) as the record did without it; another value changes it."""
    d = _base_config()
    before = cfgmod.fingerprint(d, 2)
    monkeypatch.setitem(cfgmod.SWEEP_DEFAULTS, "novel_field", 3)
    at_default = json.loads(json.dumps(d))
    at_default["sweep"]["novel_field"] = 3
    assert cfgmod.fingerprint(at_default, 2) == before == cfgmod.fingerprint(d, 2)
    at_default["sweep"]["novel_field"] = 4
    assert cfgmod.fingerprint(at_default, 2) != before
    moved = json.loads(json.dumps(d))
    moved["sweep"]["seeds"] += 1
    assert cfgmod.fingerprint(moved, 2) != before


# Values computed on another machine or jax build agree with this one's within float32
# rounding, not bit for bit (simlab.engine.machine): XLA's vector code differs between
# instruction sets (the sums' order, fused multiply-adds). The layout-1 metrics (cosines,
# normalised entropies, |x| <= 1, of a d_model 16 block on 8 tokens) differed by 1.2e-8 between
# the fixture's machine and an AMD EPYC (issue 52); the bound is 16 float32 ulps of 1.
ACROSS_MACHINES = 16 * float(np.finfo(np.float32).eps)


def test_a_directory_keeps_the_rule_it_was_made_under(monkeypatch, tmp_path, layout_1):
    """With rule 2 current, a directory made under rule 1 is reloaded as finished, resumed
    from its chunks and grown under rule 1 (its new part, a new directory, under rule 2), while
    a new directory is made under rule 2; every record checks under its own rule. The resumed
    values equal a fresh run's on this machine bit for bit, and the fixture's (computed on
    another machine) within ACROSS_MACHINES."""
    d, mk = layout_1
    with monkeypatch.context() as m:
        m.setattr(cfgmod, "FINGERPRINT_RULE", 1)
        run_sweep(**mk.PLAIN, out=tmp_path / "half", quiet=True, worker=(0, 2))  # rule 1
    assert cfgmod.FINGERPRINT_RULE == 2
    chunks = []
    old = run_sweep(**mk.PLAIN, out=d / "plain", quiet=True, on_chunk=chunks.append)
    assert chunks == [] and records.RULE_KEY not in old.meta  # finished: loaded as it is
    resumed = run_sweep(**mk.PLAIN, out=tmp_path / "half", quiet=True, on_chunk=chunks.append)
    assert 0 < sum(c.points for c in chunks) < 2 * 3  # only the units the worker left
    assert resumed.meta[records.RULE_KEY] == 1
    assert resumed.meta["fingerprint"] == old.meta["fingerprint"]
    new = run_sweep(**mk.PLAIN, out=tmp_path / "new", quiet=True)
    assert new.meta[records.RULE_KEY] == 2
    assert new.meta["fingerprint"] == cfgmod.fingerprint(new.meta["config"], 2)
    assert new.meta["fingerprint"] != old.meta["fingerprint"]
    for k in old.metrics:
        np.testing.assert_array_equal(resumed[k], new[k])  # one machine and jax build
        np.testing.assert_allclose(resumed[k], old[k], rtol=0, atol=ACROSS_MACHINES)
    bigger = {**mk.PLAIN, "axes": [{"name": "drift_norm", "values": [0.0, 0.5, 1.0, 2.0, 4.0]}]}
    chunks.clear()
    grown = run_sweep(**bigger, out=d / "plain", quiet=True, on_chunk=chunks.append)
    assert grown.meta[records.RULE_KEY] == 1 and grown.meta["parts"]
    state = records.read_sweep(d / "plain" / "sweep.json")
    assert state[records.RULE_KEY] == 1
    part = json.loads((d / "plain" / "parts" / "1" / "sweep.json").read_text())
    assert part[records.RULE_KEY] == 2
    results.load(d / "plain")
    results.load(d / "plain" / "parts" / "1")


def test_a_rule_1_directory_resumes_its_missing_units(tmp_path, layout_1, capsys):
    """The layout-1 plain directory, its results and one seed's chunk removed, resumes under
    rule 1: only that seed's units are computed, the fingerprint is the fixture's, the kept
    chunk's values are the fixture's bit for bit and the recomputed ones within
    ACROSS_MACHINES; the fixture's units carry no machine facts, so the run warns that it mixes
    them with this machine's, naming both, and meta.json records both."""
    from simlab.engine import machine

    d, mk = layout_1
    fixture = results.load(d / "plain")
    for name in ("results.npz", "meta.json", "chunks/seed1_mb0-1.npz"):
        (d / "plain" / name).unlink()
    chunks = []
    res = run_sweep(**mk.PLAIN, out=d / "plain", quiet=True, on_chunk=chunks.append)
    assert [(c.seed, c.points) for c in chunks] == [(1, 3)]
    assert res.meta[records.RULE_KEY] == 1
    assert res.meta["fingerprint"] == fixture.meta["fingerprint"]
    for k in fixture.metrics:
        np.testing.assert_array_equal(res[k][:, 0], fixture[k][:, 0])
        np.testing.assert_allclose(res[k], fixture[k], rtol=0, atol=ACROSS_MACHINES)
    assert res.meta["machines"] == [None, machine.facts()]
    lines = [x for x in capsys.readouterr().err.splitlines() if "machine facts" in x]
    assert lines == [machine.mixed_line([None, machine.facts()], d / "plain")]
    assert "not recorded" in lines[0] and machine.describe(machine.facts()) in lines[0]


ELSEWHERE = {
    "platform": "cpu",
    "arch": "x86_64",
    "cpu": "Another CPU",
    "vector_isa": ["avx", "avx2", "fma"],
    "jax": "0.0.1",
    "jaxlib": "0.0.1",
}


def test_units_of_another_machine_are_reused_and_named(monkeypatch, tmp_path, capsys):
    """Machine facts never enter the fingerprint: chunks a worker computed under other facts
    are reused by a resume (only the rest is computed), and so are the parts of a sweep that
    grows; each chunk record and meta.json names the facts, and a run that combines different
    ones warns in one line naming both. A sweep computed under one set of facts does not warn."""
    from simlab.engine import machine

    mk = _layout_1()
    here = machine.facts()
    with monkeypatch.context() as m:
        m.setattr(machine, "facts", lambda: ELSEWHERE)
        run_sweep(**mk.PLAIN, out=tmp_path / "mixed", quiet=True, worker=(0, 2))
        run_sweep(**mk.PLAIN, out=tmp_path / "grown", quiet=True)
    ours = run_sweep(**mk.PLAIN, out=tmp_path / "here", quiet=True)
    assert ours.meta["machines"] == [here] and "machine facts" not in capsys.readouterr().err
    with np.load(tmp_path / "mixed" / "chunks" / "seed0_mb0-1.npz") as z:
        assert json.loads(str(z[records.RECORD]))["machine"] == ELSEWHERE
    chunks = []
    res = run_sweep(**mk.PLAIN, out=tmp_path / "mixed", quiet=True, on_chunk=chunks.append)
    assert [(c.seed, c.points) for c in chunks] == [(1, 3)]
    assert res.meta["fingerprint"] == ours.meta["fingerprint"]
    assert res.meta["machines"] == [ELSEWHERE, here]
    err = capsys.readouterr().err.splitlines()
    assert err == [machine.mixed_line([ELSEWHERE, here], tmp_path / "mixed")]
    assert err[0].startswith("simlab: warning: ") and "Another CPU [avx avx2 fma]" in err[0]
    assert machine.describe(here) in err[0]
    chunks.clear()
    grown = run_sweep(**mk.GROWN, out=tmp_path / "grown", quiet=True, on_chunk=chunks.append)
    assert sum(c.points for c in chunks) == 4 * 3 - 3 * 2  # the new pairs only
    assert grown.meta["machines"] == [ELSEWHERE, here]
    assert machine.mixed_line([ELSEWHERE, here], tmp_path / "grown") in capsys.readouterr().err


def test_cpu_facts_from_cpuinfo():
    """The CPU model and the vector flags (sorted) from /proc/cpuinfo's text, x86 and ARM."""
    from simlab.engine import machine

    x86 = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
        "flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512bw "
        "aes rdrand\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu\n"
    )
    assert machine.cpu(x86) == (
        "AMD EPYC 7B13",
        ["avx", "avx2", "avx512bw", "avx512f", "f16c", "fma", "sse", "sse2", "sse4_1", "sse4_2",
         "ssse3"],
    )  # fmt: skip
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve sve2\nCPU part\t: 0xd40\n"
    model, flags = machine.cpu(arm)
    assert flags == ["asimd", "sve", "sve2"] and model  # the model: platform's word


def test_finished_is_decided_in_one_place(tmp_path, layout_1):
    """records.is_finished is the one judge of "finished": results.npz and meta.json both; the
    callers (info, merge, load, the parts, the waiting workers) spell it out nowhere else."""
    d, _ = layout_1
    assert records.is_finished(d / "plain") and records.is_finished(d / "grown" / "parts" / "0")
    (d / "plain" / "meta.json").unlink()
    assert not records.is_finished(d / "plain") and not records.is_finished(tmp_path)
    spelled = re.compile(r'"results\.npz"\)\.exists|"meta\.json"\)\.exists')
    for path in sorted((REPO / "simlab").rglob("*.py")):
        assert not spelled.search(path.read_text()), path


def _base_config() -> dict:
    mk = _layout_1()
    cfg = cfgmod.load_config(mk.PLAIN)
    d = cfg.to_dict()
    d["sweep"].update(micro_batch=8, dtype="float32", first_seed=0)
    return d


def _other(value, default):
    """A value other than `value` (and than the field's default) of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value * 2.0 + 1.5
    if isinstance(value, str):
        return value + "_other"
    if isinstance(value, list):
        return value[:1]
    return {"metrics": ["out_cos"], "micro_batch": 4, "dtype": "float64"}.get(default, 7)


FIELDS = [
    (table, name)
    for table, defaults in cfgmod.field_defaults().items()
    for name in defaults
    if not (table == "sweep" and name in cfgmod.NOT_FINGERPRINTED)
]


@pytest.mark.parametrize(("table", "name"), FIELDS, ids=[f"{t}.{n}" for t, n in FIELDS])
def test_fingerprint_rule_for_every_field(table, name):
    """For every field and knob: at its default it is hashed exactly when the current
    fingerprint rule's "hashed_at_default" names it; away from its default it always changes
    the fingerprint."""
    defaults = cfgmod.field_defaults()[table]
    d = _base_config()
    d[table][name] = defaults[name]
    rule = cfgmod.FINGERPRINT_RULES[cfgmod.FINGERPRINT_RULE]
    hashed = name in rule["hashed_at_default"].get(table, ())
    assert (name in cfgmod.canonical(d)[table]) == hashed
    if not hashed:  # a config that never sets the field hashes the same
        without = json.loads(json.dumps(d))
        del without[table][name]
        assert cfgmod.fingerprint(without) == cfgmod.fingerprint(d)
    moved = json.loads(json.dumps(d))
    moved[table][name] = _other(defaults[name], name)
    assert cfgmod.fingerprint(moved) != cfgmod.fingerprint(d)


def test_memory_only_fields_are_not_hashed():
    d = _base_config()
    for name in cfgmod.NOT_FINGERPRINTED:
        moved = json.loads(json.dumps(d))
        moved["sweep"][name] = 12345
        assert cfgmod.fingerprint(moved) == cfgmod.fingerprint(d)


def test_every_knob_is_a_field_of_the_rule():
    assert set(cfgmod.field_defaults()["knobs"]) == set(KNOBS)


def test_training_run_config_is_recognised(tmp_path):
    """A training run's meta.json (kind "train-dynamics", built by records.study_meta_record
    with its schema key) reloads without a warning about its own fields; a field TrainConfig
    lacks is named."""
    from simlab.studies.train_dynamics import config as train_config

    cfg = train_config.load(quick=True)
    meta = records.study_meta_record(
        "train-dynamics", config=dataclasses.asdict(cfg), axes=[], dims={"loss": ["seed"]}
    )
    assert meta["schema"] == records.SCHEMA and meta["kind"] == "train-dynamics"
    assert records.RULE_KEY not in meta and "fingerprint" not in meta
    axes = OrderedDict(step=np.arange(2.0))
    records.write_results(tmp_path / "run", axes, {"loss": np.zeros((2, 1))}, meta)
    _no_warnings(results.load, tmp_path / "run")
    meta["config"]["novel"] = 1
    records.write_results(tmp_path / "run2", axes, {"loss": np.zeros((2, 1))}, meta)
    with pytest.warns(UserWarning, match=r"does not know: novel"):
        results.load(tmp_path / "run2")


def _edit(path: Path, change) -> None:
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize(
    "file,change,message",
    [
        (
            "sweep.json",
            lambda r: r["config"]["sweep"].update(seeds=5),
            r"sweep.json: its config does not hash to its fingerprint .* field sweep.seeds "
            r"differs from meta.json's",
        ),
        (
            "sweep.json",
            lambda r: r.update(fingerprint="0" * 64),
            r"sweep.json: its config does not hash to its fingerprint 0000000000000000",
        ),
        (
            "meta.json",
            lambda r: r["config"]["block"].update(d_model=32),
            r"meta.json: its config does not hash to its fingerprint .* field block.d_model "
            r"differs from sweep.json's",
        ),
    ],
)
def test_an_edited_record_is_refused_naming_file_and_field(
    tmp_path, layout_1, file, change, message
):
    """sweep.json or meta.json edited by hand (a config field, or the fingerprint itself) is
    refused when read (info, load, resume), never silently accepted or converted into a
    composite sweep; the directory is left as it was."""
    from simlab import cli

    _, mk = layout_1
    out = tmp_path / "run"
    run_sweep(mk.PLAIN, out=out, quiet=True)
    _edit(out / file, change)
    files = sorted(p.name for p in out.iterdir())
    with pytest.raises(ResultsError, match=message):
        if file == "meta.json":
            results.load(out)
        else:
            run_sweep(mk.PLAIN, out=out, quiet=True)
    assert cli.main(["info", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == files
