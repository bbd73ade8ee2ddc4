"""Config parsing: defaults, canonical form, fingerprint, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simlab.engine.config import config_diff, default_config_path, fingerprint, load_config
from simlab.errors import ConfigError

AXES = [
    {"name": "drift_norm", "space": "log", "start": 0.01, "stop": 100.0, "num": 5},
    {"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": [0.5, 1, 2]},
]
BASE = {"block": {"d_model": 16, "n_heads": 2}, "axes": AXES}


def with_(**tables):
    return {**BASE, **tables}


def test_default_config():
    cfg = load_config(default_config_path())
    assert cfg.shape == (13, 13) and cfg.sweep.seeds == 2
    assert (cfg.block.kind, cfg.block.d_model, cfg.block.n_heads) == ("post_ln", 128, 4)
    assert (cfg.inputs.kind, cfg.inputs.vocab, cfg.inputs.batch, cfg.inputs.length) == (
        "embedding",
        2000,
        4,
        64,
    )
    assert cfg.axes[1].knobs == ("q_scale", "k_scale")
    assert cfg.axes[0].values[0] == 1e-2 and cfg.axes[0].values[-1] == 1e4


def test_quickstart_config():
    cfg = load_config(Path(__file__).parents[2] / "experiments" / "quickstart.toml")
    assert cfg.shape == (6, 5) and cfg.axes[1].space == "values"


def test_axes_and_fixed_knobs():
    cfg = load_config(with_(knobs={"temperature": 2}))
    np.testing.assert_allclose(cfg.axes[0].values, [0.01, 0.1, 1, 10, 100], rtol=1e-12)
    assert cfg.axes[0].values[0] == 0.01 and cfg.axes[0].values[-1] == 100.0
    assert cfg.knobs["temperature"] == 2.0
    assert not {"drift_norm", "q_scale", "k_scale"} & set(cfg.knobs)  # swept knobs aren't fixed
    lin = load_config(
        with_(axes=[{"name": "temperature", "space": "lin", "start": 1, "stop": 2, "num": 3}])
    )
    assert lin.axes[0].values == (1.0, 1.5, 2.0) and lin.axes[0].knobs == ("temperature",)


def test_canonical_round_trip_and_fingerprint():
    cfg = load_config(BASE)
    d = cfg.to_dict()
    assert load_config(d) == cfg
    fp = fingerprint(d)
    assert (
        fingerprint(load_config(with_(sweep={"chunk_size": 7, "memory_budget_mb": 3})).to_dict())
        == fp
    )
    assert (
        fingerprint(
            load_config(with_(block={"d_model": 16, "n_heads": 2, "init_sigma": 1})).to_dict()
        )
        == fp
    )
    other = load_config(with_(sweep={"seeds": 3})).to_dict()
    assert fingerprint(other) != fp and config_diff(d, other) == ["sweep.seeds"]


def test_field_added_later_keeps_old_fingerprints():
    """block.mlp_center (added after results were committed): a config written before it
    existed (no such key) and one with its default have the same fingerprint and no diff; the
    non-default value differs in both."""
    d = load_config(BASE).to_dict()
    assert d["block"]["mlp_center"] is False
    old = {**d, "block": {k: v for k, v in d["block"].items() if k != "mlp_center"}}
    assert fingerprint(old) == fingerprint(d) and config_diff(old, d) == []
    assert load_config(old) == load_config(d)
    on = load_config(with_(block={"d_model": 16, "n_heads": 2, "mlp_center": True})).to_dict()
    assert fingerprint(on) != fingerprint(d)
    assert config_diff(old, on) == config_diff(d, on) == ["block.mlp_center"]


@pytest.mark.parametrize(
    "cfg, message",
    [
        (
            with_(knobs={"temperature": 0}),
            r"knobs\.temperature: 0 is outside the allowed range \(0, inf\]",
        ),
        (
            with_(axes=[{"name": "temperature", "values": [1, 0]}]),
            r"axes\[0\]\.temperature: 0 is outside",
        ),
        (with_(block={"d_model": 16, "n_heads": 3}), r"block\.n_heads: 3 must divide d_model=16"),
        (with_(block={"widht": 3}), r"block\.widht: unknown field"),
        (
            with_(block={"d_model": 16, "n_heads": 2, "mlp_center": 1}),
            r"block\.mlp_center: must be true or false",
        ),
        (with_(inputs={"batch": 0}), r"inputs\.batch: 0 is outside"),
        (with_(extra={}), r"extra: unknown table"),
        (with_(sweep={"seeds": 0}), r"sweep\.seeds: 0 is outside the allowed range \[1, 1048576\]"),
        (with_(sweep={"seeds": 1.5}), r"sweep\.seeds: must be an integer"),
        (with_(sweep={"base_seed": -1}), r"sweep\.base_seed: -1 is outside"),
        (with_(sweep={"micro_batch": 0}), r"sweep\.micro_batch"),
        (with_(sweep={"chunk_size": 0}), r"sweep\.chunk_size"),
        (with_(sweep={"memory_budget_mb": 0}), r"sweep\.memory_budget_mb"),
        (with_(sweep={"metrics": "out_cos"}), r"sweep\.metrics: must be a non-empty list"),
        (with_(sweep={"seed": 1}), r"sweep\.seed: unknown field"),
        (with_(axes=[]), r"axes: need at least one"),
        (with_(axes=[AXES[0], {**AXES[1], "stp": 1}]), r"axes\[1\]\.stp: unknown field"),
        (with_(axes=[{**AXES[0], "start": 0.0}]), r"axes\[0\]\.start: 0\.0 must be > 0"),
        (with_(axes=[{**AXES[0], "stop": -1}]), r"axes\[0\]\.stop: -1 must be > 0"),
        (
            with_(axes=[{k: v for k, v in AXES[0].items() if k != "stop"}]),
            r"axes\[0\]\.stop: required",
        ),
        (with_(axes=[{**AXES[0], "num": 0}]), r"axes\[0\]\.num: 0 is outside"),
        (with_(axes=[{**AXES[0], "space": "exp"}]), r"axes\[0\]\.space: 'exp' is not one of"),
        (with_(axes=[{**AXES[0], "values": [1]}]), r"axes\[0\]\.space: give either values"),
        (
            with_(axes=[{"name": "lam", "values": [1]}]),
            r"axes\[0\]\.knobs: required because 'lam' is not a knob",
        ),
        (
            with_(axes=[{"name": "lam", "knobs": ["qscale"], "values": [1]}]),
            r"axes\[0\]\.knobs: unknown knob 'qscale'",
        ),
        (
            with_(axes=[AXES[0], {**AXES[0], "name": "d2", "knobs": ["drift_norm"]}]),
            r"axes\[1\]\.knobs: knob 'drift_norm' is already driven",
        ),
        (with_(axes=[AXES[0], AXES[0]]), r"axes\[1\]\.name: 'drift_norm' is already"),
        (with_(knobs={"q_scale": 2}), r"knobs\.q_scale: is driven by axis 'lambda'"),
        (
            with_(axes=[{"name": "lam", "knobs": ["q_scale"], "values": []}]),
            r"axes\[0\]\.values: must be a non-empty",
        ),
    ],
)
def test_errors_name_the_field(cfg, message):
    with pytest.raises(ConfigError, match=message):
        load_config(cfg)


def test_toml_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[block\nd_model = 3\n")
    with pytest.raises(ConfigError, match="bad.toml: invalid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="missing.toml: no such config file"):
        load_config(tmp_path / "missing.toml")


def test_unknown_fields_are_named_in_table_order_with_the_allowed_list():
    """[sweep], [refine] and [[axes]] refuse the first unknown field in the table's order, with
    the table's own list of fields (simlab.validate.check_fields)."""
    from simlab.engine.config import SWEEP_DEFAULTS
    from simlab.engine.grid import AXIS_FIELDS, REFINE_FIELDS

    axis = dict(name="lambda", knobs=["q_scale"], values=[1.0, 2.0])
    cases = [
        (dict(sweep=dict(seeds=2, zz=1, aa=2)), "sweep.zz", SWEEP_DEFAULTS),
        (dict(refine=dict(metric="out_cos", wrong=1)), "refine.wrong", REFINE_FIELDS),
        (dict(axes=[axis, dict(axis, name="b", spce="lin")]), "axes[1].spce", AXIS_FIELDS),
    ]
    for extra, field, allowed in cases:
        cfg = {"axes": [axis], **extra}
        with pytest.raises(ConfigError) as e:
            load_config(cfg)
        assert str(e.value) == f"{field}: unknown field; allowed: {', '.join(allowed)}"
