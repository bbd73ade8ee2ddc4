"""Bring your own entry: the registries (live names, validation at registration), plugins found
three ways (config, --plugin, entry points) and recorded in the fingerprint, and custom labs
(LabProtocol) whose identity keeps their data apart."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

import simlab
from simlab import plugins
from simlab.cli import main
from simlab.core.block import BLOCKS, BlockKind, identity
from simlab.core.inputs import INPUTS
from simlab.core.knobs import KNOBS, Knob
from simlab.core.metrics import METRICS, Metric
from simlab.engine.config import fingerprint
from simlab.errors import ConfigError

from conftest import ToyLab

TINY = dict(
    block=dict(kind="post_ln", d_model=8, n_heads=2, mlp_ratio=1),
    inputs=dict(kind="gaussian", batch=2, length=4),
    axes=[dict(name="drift_norm", values=[0.0, 1.0, 3.0])],
    sweep=dict(seeds=1, micro_batch=2),
)


@pytest.fixture
def scratch():
    """Entries registered by the test are removed afterwards."""
    regs = (BLOCKS, INPUTS, METRICS, KNOBS)
    before = [list(r) for r in regs]
    yield
    for r, names in zip(regs, before):
        for n in [n for n in r if n not in names]:
            r.unregister(n)


def _metric(name="y_norm", **kw):
    return Metric(name, lambda c: jnp.mean(jnp.abs(c.layer.y)), ("y",), "mean |y|", **kw)


# ------------------------------------------------------------------------------ registries
@pytest.mark.slow
def test_metric_registered_at_run_time_is_seen_by_a_sweep(scratch):
    """The names are read live: a metric registered after simlab was imported can be asked
    for (it used to be refused: `sweep.metrics: unknown metric`), and is then computed."""
    simlab.register_metric(_metric(bounds=(0.0, np.inf), default=False))
    res = simlab.run_sweep({**TINY, "sweep": {"metrics": ["y_norm", "out_cos"]}}, quiet=True)
    assert res["y_norm"].shape == (3, 1) and np.all(res["y_norm"] > 0)
    # default=False: not computed unless asked for
    assert "y_norm" not in simlab.run_sweep(TINY, quiet=True).metrics


@pytest.mark.parametrize(
    "registry,entry,message",
    [
        (METRICS, _metric("out_cos"), "metric 'out_cos': the name is taken"),
        (METRICS, _metric(bounds=(1.0, 0.0)), "metric 'y_norm': bounds must be"),
        (METRICS, dataclasses.replace(_metric(), reads=("z",)), "reads must be a non-empty"),
        (METRICS, dataclasses.replace(_metric(), fn=None), "fn must be callable"),
        (KNOBS, Knob("q_scale", 1.0, 0.0, 2.0, "x"), "knob 'q_scale': the name is taken"),
        (KNOBS, Knob("g", 5.0, 0.0, 2.0, "x"), "knob 'g': default must be"),
        (KNOBS, Knob("seed", 0.0, 0.0, 2.0, "x"), "knob 'seed': name is reserved"),
        (BLOCKS, BlockKind("b", identity, None, False, False, "f"), "token_wise must be callable"),
        (BLOCKS, BlockKind("", identity, identity, False, False, "f"), "name must be"),
        (INPUTS, dataclasses.replace(INPUTS["gaussian"], name="g2", knobs=("nope",)), "knobs"),
        (METRICS, INPUTS["gaussian"], "expected a Metric"),
    ],
)
def test_registration_is_validated(scratch, registry, entry, message):
    n = len(registry)
    with pytest.raises(ConfigError, match=message):
        registry.register(entry)
    assert len(registry) == n  # nothing half-registered


def test_a_new_knob_is_a_knob_everywhere_and_leaves_old_fingerprints_alone(scratch):
    """A registered knob can be swept and fixed like the built-in ones, and while it sits at
    its default the fingerprint of a config is the one it had before the knob existed."""
    from simlab.engine.config import load_config

    before = fingerprint(load_config(TINY).to_dict())
    simlab.register_knob(Knob("my_gain", 1.0, 0.0, 10.0, "a plugin's knob"))
    cfg = load_config(TINY)
    assert cfg.knobs["my_gain"] == 1.0 and fingerprint(cfg.to_dict()) == before
    moved = load_config({**TINY, "knobs": {"my_gain": 2.0}})
    assert fingerprint(moved.to_dict()) != before
    with pytest.raises(ConfigError, match=r"knobs.my_gain: 20.0 is outside the allowed range"):
        load_config({**TINY, "knobs": {"my_gain": 20.0}})


# ------------------------------------------------------------------------------ plugins
PLUGIN = textwrap.dedent("""
    import jax.numpy as jnp
    import simlab
    VALUE = {value}
    simlab.register_metric(simlab.Metric(
        "plug_metric", lambda c: VALUE + 0 * jnp.mean(c.layer.y), ("y",), "a constant",
        default=False))
""")


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch, scratch):
    """A folder on sys.path to write plugin modules into (unloaded afterwards)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("plug_")]:
        del sys.modules[name]
        plugins._loaded.pop(name, None)
    importlib.invalidate_caches()


def test_plugin_in_config_is_loaded_recorded_and_fingerprinted(plugin_dir, tmp_path):
    """`plugins = [...]` imports the module before validation; the sweep records the module
    and a hash of its source; an edited plugin does not resume the old directory."""
    (plugin_dir / "plug_a.py").write_text(PLUGIN.format(value=1.5))
    cfg = {"plugins": ["plug_a"], **TINY, "sweep": {"metrics": ["plug_metric"]}}
    out = tmp_path / "run"
    res = simlab.run_sweep(cfg, out=out, quiet=True)
    np.testing.assert_array_equal(res["plug_metric"], 1.5)
    meta = simlab.load(out).meta["config"]
    assert meta["plugins"] == ["plug_a"]
    (src,) = meta["sources"]
    assert (src["registry"], src["entry"], src["module"]) == ("metrics", "plug_metric", "plug_a")
    assert len(src["sha256"]) == 64 and src["version"] is None
    # the plugin changes: the same config into the same directory is refused
    (plugin_dir / "plug_a.py").write_text(PLUGIN.format(value=2.5))
    METRICS.unregister("plug_metric")
    del sys.modules["plug_a"]
    plugins._loaded.pop("plug_a")
    with pytest.raises(ConfigError, match=r"holds a different sweep \(differs in: sources\)"):
        simlab.run_sweep(cfg, out=out, quiet=True)


@pytest.mark.parametrize(
    "module,code,message",
    [
        ("plug_missing", None, "plugin 'plug_missing' not found"),
        ("plug_broken", "raise RuntimeError('boom')", "plugin 'plug_broken' failed to import: "),
        (
            "plug_dup",
            "import simlab\nsimlab.register_metric(simlab.Metric('out_cos', "
            "lambda c: 0, ('y',), 'x'))",
            "plugin 'plug_dup': register metric 'out_cos'",
        ),
    ],
)
def test_bad_plugin_is_exit_2_naming_it_before_any_output(
    plugin_dir, tmp_path, capsys, module, code, message
):
    if code is not None:
        (plugin_dir / f"{module}.py").write_text(code)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[axes]]\nname = "drift_norm"\nvalues = [1.0]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(cfg), "--out", str(out), "--plugin", module]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err and "--plugin" in captured.err
    assert not out.exists()
    # the same from a config file's plugins list, naming the field
    cfg.write_text(f'plugins = ["{module}"]\n[[axes]]\nname = "drift_norm"\nvalues = [1.0]\n')
    assert main(["sweep", str(cfg), "--out", str(out)]) == 2
    assert "plugins[0]: " + message in capsys.readouterr().err


def test_entry_point_plugins_are_found(plugin_dir, monkeypatch):
    """A package that declares a "simlab.plugins" entry point registers itself."""
    (plugin_dir / "plug_ep.py").write_text(PLUGIN.format(value=4.0))
    dist = plugin_dir / "plug_ep-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plug-ep\nVersion: 1.2\n")
    (dist / "entry_points.txt").write_text("[simlab.plugins]\nep = plug_ep\n")
    (dist / "top_level.txt").write_text("plug_ep\n")
    importlib.invalidate_caches()
    plugins.load_entry_points.cache_clear()
    try:
        assert "plug_ep" in plugins.load_entry_points() and "plug_metric" in METRICS
        info = plugins.describe("plug_ep")
        assert info["version"] == "plug-ep 1.2" and len(info["sha256"]) == 64
    finally:
        plugins.load_entry_points.cache_clear()


# ------------------------------------------------------------------------------ custom labs
class Abort(Exception):
    pass


def test_another_lab_cannot_resume_a_directory(tmp_path):
    """The bug this closes: a sweep run with one custom lab into a directory used to resume and
    merge the chunks another lab wrote there. The lab's identity is in the fingerprint."""
    cfg = dict(
        axes=[dict(name="drift_norm", values=[0.0, 1.0, 2.0, 3.0])],
        sweep=dict(seeds=1, micro_batch=1, chunk_size=1),
    )
    out = tmp_path / "run"

    def stop(info):
        raise Abort

    with pytest.raises(Abort):
        simlab.run_sweep(cfg, lab=ToyLab(d=8), out=out, quiet=True, on_chunk=stop)
    with pytest.raises(ConfigError, match=r"differs in: lab.attributes.d"):
        simlab.run_sweep(cfg, lab=ToyLab(d=6), out=out, quiet=True)

    class Named(ToyLab):
        def identity(self):
            return {"model": "toy", "d": self.d}

    with pytest.raises(ConfigError, match=r"differs in: lab\."):
        simlab.run_sweep(cfg, lab=Named(d=8), out=out, quiet=True)
    # the same lab resumes, computing only what is missing
    res = simlab.run_sweep(cfg, lab=ToyLab(d=8), out=out, quiet=True)
    assert res.meta["chunks_reused"] == 1 and res.meta["config"]["lab"]["attributes"]["d"] == 8
    assert res.meta["config"]["lab"]["class"] == "conftest.ToyLab"


def test_lab_identity_and_protocol_errors():
    class Bad:
        pass

    with pytest.raises(ConfigError, match="lab: a Bad is not a lab; it needs metric_names"):
        simlab.run_sweep(TINY, lab=Bad(), quiet=True)

    class Unjsonable(ToyLab):
        def identity(self):
            return {"f": object()}

    with pytest.raises(ConfigError, match=r"lab.identity\(\): must be JSON-able"):
        simlab.run_sweep({"axes": TINY["axes"]}, lab=Unjsonable(), quiet=True)
    assert isinstance(ToyLab(), simlab.LabProtocol)


def test_default_lab_keeps_the_fingerprint_of_committed_results():
    """simlab's own Lab adds nothing to the resolved config: the committed paper map still
    reloads by fingerprint (its sweep.json was written before labs and plugins were recorded)."""
    from pathlib import Path

    paper = Path(__file__).resolve().parents[2] / "figures" / "data" / "paper"
    stored = json.loads((paper / "sweep.json").read_text())
    assert fingerprint(stored["config"], stored.get("fingerprint_rule", 1)) == stored["fingerprint"]
    res = simlab.load(paper)
    assert "lab" not in res.meta["config"] and "sources" not in res.meta["config"]


def test_conformance_cases_leave_out_kinds_that_cannot_compute_the_metrics():
    """With a plugin's block kind that has no token_wise_mlp registered (the example plugin's
    sandwich has none), the metric conformance cases of metrics reading the MLP branch leave
    it out (the Lab refuses it for them) and keep it for the others."""
    from simlab import testing

    kind = dataclasses.replace(BLOCKS["post_ln"], name="plug_no_mlp_output", token_wise_mlp=None)
    BLOCKS.register(kind)
    try:
        kinds = {c.block.kind for c in testing.metric_cases(["mlp_cos", "out_cos"])}
        assert "plug_no_mlp_output" not in kinds and "post_ln" in kinds
        for case in testing.metric_cases(["mlp_cos"]):
            case.lab()  # every case it keeps is one the Lab accepts
        kinds = {c.block.kind for c in testing.metric_cases(["out_cos"])}
        assert "plug_no_mlp_output" in kinds
    finally:
        BLOCKS.unregister("plug_no_mlp_output")


def test_a_metric_of_the_wrong_shape_is_refused_naming_its_plugin(scratch, tmp_path):
    """A plugin metric returning (D,) instead of one number per layer is refused in one line
    naming the metric and its module, before anything is written (it used to be stored with
    an extra axis that `simlab info` called "layer")."""
    simlab.register_metric(Metric("y_vec", lambda c: jnp.mean(c.layer.y, (0, 1)), ("y",), "y"))
    with pytest.raises(
        ConfigError,
        match=r"metric 'y_vec' \(registered by .*test_plugins\): "
        r"returns shape \(8,\) per layer",
    ):
        simlab.run_sweep({**TINY, "sweep": {"metrics": ["y_vec"]}}, out=tmp_path / "r", quiet=True)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_an_always_nan_plugin_metric_is_reported(scratch, tmp_path, capsys):
    """A plugin metric that is NaN everywhere (within declared bounds [0, 1]) is stored as NaN
    and reported at the end of the run: every value counted, on stderr and in meta.json."""
    simlab.register_metric(
        Metric("y_nan", lambda c: jnp.nan * jnp.mean(c.layer.y), ("y",), "nan", bounds=(0, 1))
    )
    res = simlab.run_sweep(
        {**TINY, "sweep": {"metrics": ["y_nan"]}}, out=tmp_path / "r", quiet=True
    )
    assert np.isnan(res["y_nan"]).all()
    assert res.meta["numerics"]["y_nan"]["non_finite"] == res["y_nan"].size == 3
    assert "metric y_nan: 3 NaN or Inf (first at drift_norm=0, seed=0)" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_inputs_are_stored_as_nan_and_reported(scratch, tmp_path, capsys, bad):
    """A plugin input kind whose draw holds one NaN (or Inf) token, through the real Lab: the
    cosines of the layer are stored as NaN (never the 0 that `where(norm > 0, ..., 0)` made of
    them), and stderr and meta.json count them."""
    from simlab.core.inputs import InputKind

    def comps(spec, d, z, t_key):
        x = z["z"].at[0, 1, 0].set(bad)
        return {"x": x}

    simlab.register_inputs(
        InputKind("one_bad", lambda spec, d: {"z": ((spec.batch, spec.length, d), "normal")}, comps)
    )
    cfg = {**TINY, "inputs": {"kind": "one_bad", "batch": 2, "length": 4}}
    cfg["sweep"] = {**TINY["sweep"], "metrics": ["input_cos", "out_cos", "attn_entropy"]}
    res = simlab.run_sweep(cfg, out=tmp_path / "r", quiet=True)
    for m in ("input_cos", "out_cos"):
        assert np.isnan(res[m]).all(), m
        assert res.meta["numerics"][m]["non_finite"] == res[m].size
    assert f"metric input_cos: {res['input_cos'].size} NaN or Inf" in capsys.readouterr().err
