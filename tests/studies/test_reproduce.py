"""The facts the reproduction figures rely on, and `simlab reproduce` end to end at tiny sizes."""

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reproduce_tiny import EXPERIMENTS, HALVES, SPECIFIC, check_experiment_tiny

import simlab
from simlab import plot
from simlab.cli import main as cli_main
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.engine import select
from simlab.engine.results import Results
from simlab.errors import ConfigError
from simlab.studies import reproduce


def _points(lab, knob_list):
    state = lab.seed_state(jax.random.PRNGKey(3))
    stacked = {k: jnp.stack([knob_arrays(d)[k] for d in knob_list]) for k in knob_arrays({})}
    return jax.jit(jax.vmap(lab.point, in_axes=(None, 0)))(state, stacked)


@pytest.mark.slow
def test_entropy_decreases_monotonically_with_scale():
    # H(softmax(c l)) is non-increasing in c for every row (dH/dc = -c Var_w(l) <= 0), so the
    # mean normalised entropy is too: q_scale = k_scale = lambda scales the logits by lambda^2.
    lab = Lab(
        BlockSpec(kind="post_ln", d_model=32, n_heads=4, init="fan_in"),
        InputSpec(kind="embedding", vocab=100, batch=2, length=16, embed_std=1.0),
        metrics=("attn_entropy",),
    )
    lams = np.geomspace(0.05, 20, 12)
    ent = np.asarray(_points(lab, [dict(q_scale=l, k_scale=l) for l in lams])["attn_entropy"])
    assert ent[0] > 0.99 and ent[-1] < 0.1
    assert np.all(np.diff(ent) <= 1e-6), ent


@pytest.mark.slow
def test_uniform_attention_gives_within_cosine_one():
    # Uniform rows: every token of a sequence receives the same average value vector.
    lab = Lab(
        BlockSpec(kind="attention", d_model=32, n_heads=4, mlp=False, init="fan_in"),
        InputSpec(kind="gaussian", batch=3, length=16),
        metrics=("out_cos_within", "attn_entropy"),
    )
    out = _points(lab, [dict(temperature=t, attn_residual=0.0) for t in (1.0, 1e6)])
    assert float(out["out_cos_within"][0]) < 0.9
    assert float(out["out_cos_within"][1]) > 1 - 1e-5
    assert float(out["attn_entropy"][1]) > 1 - 1e-6


def _sweep_along(coords, space):
    """A sweep with axis "s" (these coordinates, this space) and axis "x"; the metric "m" equals
    the index along "s", so a cut along "x" shows which coordinate of "s" was selected."""
    n = len(coords)
    axes = OrderedDict(s=np.asarray(coords, dtype=float), x=np.array([1.0, 2.0]))
    m = np.broadcast_to(np.arange(n, dtype=float)[:, None, None], (n, 2, 2)).copy()
    meta = {"axes": [{"name": "s", "space": space}, {"name": "x", "space": "lin"}]}
    return Results(axes, {"m": m}, meta)


@pytest.mark.parametrize(
    "coords, space, value, want",
    [
        ([1.0, 10.0, 100.0], "log", 40.0, 2),  # |log 0.4| < |log 4|; linear distance picks 10
        ([0.1, 1.0, 10.0, 100.0], "values", 40.0, 3),  # a log-spaced list: log distance
        ([1.0, 50.5, 100.0], "lin", 20.0, 0),  # 19 < 30.5; log distance picks 50.5
        ([1.0, 2.0, 3.0, 60.0], "values", 20.0, 2),  # not log-spaced: linear distance (log: 60)
    ],
)
def test_plot_and_reproduce_select_the_same_coordinate(coords, space, value, want):
    # `simlab plot --select s=VALUE` and a figure's `select = {s = VALUE}` cut at the same point:
    # the nearest coordinate on the axis's own scale (simlab.engine.select).
    res = _sweep_along(coords, space)
    assert select.nearest(res, "s", value) == want
    _, ax = plot.plot_results(res, x="x", metric="m", select={"s": value})
    assert ax.get_lines()[0].get_ydata().tolist() == [want, want]
    assert reproduce.select_indices(res, {"s": value}) == {"s": want}
    assert reproduce.select_indices(res, {"s": "first", "x": "last"}) == {"s": 0, "x": 1}
    with pytest.raises(ConfigError, match="figures.select.s"):
        reproduce.select_indices(res, {"s": "middle"})


def test_experiment_config_quick_and_errors(tmp_path):
    full = reproduce.experiment_config("paper", quick=False)
    quick = reproduce.experiment_config("paper", quick=True)
    assert full["block"]["d_model"] == 768 and full["inputs"]["length"] == 512
    assert all(a["num"] >= 25 for a in full["axes"]) and full["sweep"]["seeds"] >= 3
    assert quick["block"]["d_model"] < 768 and quick["axes"][0]["num"] < 25
    assert quick["block"]["kind"] == full["block"]["kind"] == "post_ln"
    with pytest.raises(ConfigError, match="extra.bogus"):
        reproduce.experiment_config("paper", quick=True, extra={"bogus": 1})
    with pytest.raises(ConfigError, match="unknown experiment 'nope'"):
        reproduce.reproduce(["nope"], out=tmp_path, quick=True)
    assert list(tmp_path.iterdir()) == []


def test_paper_refined_is_the_paper_protocol_with_its_own_seed():
    """experiments/paper_refined.toml: experiment 1's block, inputs and axis ranges, a coarse
    7 x 7 grid refined 4 levels at attn_entropy = 0.5 (the 97 x 97 lattice: steps a quarter of
    experiment 1's 25 x 25 grid's), and a base_seed no other experiment uses."""
    paper = reproduce.experiment_config("paper", quick=False)
    refined = reproduce.experiment_config("paper_refined", quick=False)
    assert refined["block"] == paper["block"] and refined["inputs"] == paper["inputs"]
    for a, b in zip(refined["axes"], paper["axes"]):
        assert (a["start"], a["stop"], a["num"]) == (b["start"], b["stop"], 7)
        assert (a["num"] - 1) * 2 ** refined["refine"]["levels"] == 4 * (b["num"] - 1)
    assert refined["refine"]["metric"] == "attn_entropy" and refined["refine"]["level"] == 0.5
    seeds = {
        n: reproduce.experiment_config(n, quick=False).get("sweep", {}).get("base_seed", 0)
        for n in reproduce.experiment_files()
        if reproduce.experiment_variants(n, quick=False) is None
    }
    mine = seeds.pop("paper_refined")
    assert mine not in seeds.values()


def test_every_experiment_has_a_case():
    files = reproduce.experiment_files()
    assert len(files) >= 12 and set(SPECIFIC) <= set(files)
    # the two halves (this file's and tests/studies/test_reproduce_experiments.py's) are all
    assert sorted(HALVES[0] + HALVES[1]) == sorted(files) == EXPERIMENTS


@pytest.mark.slow
@pytest.mark.parametrize("name", HALVES[0])
def test_experiment_tiny(name, tmp_path):
    """The first half of the experiment configs at tiny sizes (reproduce_tiny.HALVES; the
    other half in tests/studies/test_reproduce_experiments.py)."""
    check_experiment_tiny(name, tmp_path)


VARIANTS_TOML = """
[block]
kind = "post_ln"
d_model = 16
n_heads = 2
init = "fan_in"
[inputs]
kind = "embedding"
vocab = 50
batch = 2
length = 8
[[axes]]
name = "drift_norm"
values = [0.1, 10.0]
[sweep]
metrics = ["out_cos", "out_cos_gain"]
[variants]
width = [{ name = "d8", label = "d 8", block = { d_model = 8, n_heads = 1 } },
         { name = "d16", block = { d_model = 16 } }]
mlp = [{ name = "bert", block = { mlp_center = false } },
       { name = "centered", block = { mlp_center = true } }]
[quick]
variants = { width = [{ name = "d4", block = { d_model = 4, n_heads = 1 } }] }
[[figures]]
kind = "variants"
x = "drift_norm"
metrics = ["out_cos_gain", "out_cos"]
"""


@pytest.mark.slow
def test_variants_product_sweeps_and_figures(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "wv.toml").write_text(VARIANTS_TOML)
    vs = reproduce.experiment_variants("wv", quick=False, directory=exp)
    assert [v.name for v in vs] == ["d8-bert", "d8-centered", "d16-bert", "d16-centered"]
    assert vs[1].labels == {"width": "d 8", "mlp": "centered"}
    assert vs[1].tables["block"] == {"d_model": 8, "n_heads": 1, "mlp_center": True}
    quick = reproduce.experiment_variants("wv", quick=True, directory=exp)
    assert [v.name for v in quick] == ["d4-bert", "d4-centered"]
    done = reproduce.reproduce(["wv"], out=tmp_path / "out", directory=exp, quiet=True)
    files = done["wv"][0]
    assert [f.name for f in files] == ["wv_out_cos_gain.png", "wv_out_cos.png"]
    assert all(f.stat().st_size > 10_000 for f in files)
    # each variant's data is the sweep of its own config, run directly; out_cos_gain is
    # out_cos - input_cos, with the input_cos of the width's first variant: the MLP variants of
    # a width share their inputs (paired seeds; one input_cos sweep per width, not per variant)
    input_cos = {}
    for v in vs:
        got = simlab.load(tmp_path / "out" / "data" / "wv" / v.name)
        cfg = reproduce.experiment_config("wv", False, exp, variant=v)
        want = simlab.run_sweep(cfg, out=None, quiet=True)
        np.testing.assert_array_equal(got["out_cos_gain"], want["out_cos_gain"])
        if v.labels["width"] not in input_cos:
            only = {**cfg, "sweep": {"metrics": ["input_cos"]}}
            input_cos[v.labels["width"]] = simlab.run_sweep(only, out=None, quiet=True)["input_cos"]
        np.testing.assert_allclose(
            got["out_cos_gain"], want["out_cos"] - input_cos[v.labels["width"]], atol=1e-6
        )
    centred = simlab.load(tmp_path / "out" / "data" / "wv" / "d16-centered")["out_cos"]
    plain = simlab.load(tmp_path / "out" / "data" / "wv" / "d16-bert")["out_cos"]
    assert np.max(np.abs(centred - plain)) > 1e-4  # the ablation changes the output


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('name = "d16"', 'name = "d 16"', r"variants\.width\[1\]\.name: required"),
        ("variants = { width", "variants = { depth", r"quick\.variants\.depth: not a dimension"),
        ('"centered", block', '"centered", colour = 1, block', r"mlp\[1\]\.colour: unknown field"),
    ],
)
def test_variants_errors_name_the_field(tmp_path, old, new, message):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "wv.toml").write_text(VARIANTS_TOML.replace(old, new))
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message):
        reproduce.reproduce(["wv"], out=out, quick=True, directory=exp, quiet=True)
    assert not out.exists() or list(out.iterdir()) == []


def test_cli_counts_figures_in_english(tmp_path, monkeypatch, capsys):
    """`simlab reproduce` with one figure says "1 figure", not "1 figures"."""
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "one.toml").write_text(
        "[block]\nd_model = 8\nn_heads = 2\n[inputs]\nbatch = 2\nlength = 4\nvocab = 20\n"
        '[[axes]]\nname = "drift_norm"\nvalues = [0.1, 1.0]\n[sweep]\nmetrics = ["out_cos"]\n'
        '[[figures]]\nkind = "curves"\nx = "drift_norm"\nmetrics = ["out_cos"]\n'
    )
    monkeypatch.setenv("SIMLAB_EXPERIMENTS", str(exp))
    assert cli_main(["reproduce", "--quick", "--quiet", "--out", str(tmp_path / "out")]) == 0
    assert "reproduce: 1 figure in " in capsys.readouterr().out


def test_group_named_like_another_config_is_refused(tmp_path, monkeypatch, capsys):
    """A group that takes a config's name would make --only NAME ambiguous: exit 2, one line
    naming the file, nothing computed."""
    exp = tmp_path / "exp"
    exp.mkdir()
    body = (
        "[block]\nd_model = 8\nn_heads = 2\n[inputs]\nbatch = 2\nlength = 4\nvocab = 20\n"
        '[[axes]]\nname = "drift_norm"\nvalues = [0.1, 1.0]\n[sweep]\nmetrics = ["out_cos"]\n'
        '[[figures]]\nkind = "curves"\nx = "drift_norm"\nmetrics = ["out_cos"]\n'
    )
    (exp / "a.toml").write_text('experiment = "a"\n' + body)
    (exp / "a_more.toml").write_text('experiment = "a"\n' + body)
    monkeypatch.setenv("SIMLAB_EXPERIMENTS", str(exp))
    out = tmp_path / "out"
    assert cli_main(["reproduce", "--quick", "--quiet", "--only", "a", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a.toml" in err[0] and "'a'" in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "table",
    [
        {"d_model": 48, "n_heads": 4, "d_ff": 100},  # HF's intermediate_size 100 at hidden 48
        {"d_model": 32, "n_heads": 4, "mlp_ratio": 3},
        {"d_model": 32, "n_heads": 4},  # the spec's own default ratio
    ],
)
def test_overlays_read_the_mlp_width_through_the_spec(table):
    """The theory overlays' F / D of a stored [block] table is BlockSpec.mlp_width / d_model (the
    one place the MLP width is read), d_ff included; a table no spec accepts is refused."""
    from simlab.studies.reproduce import overlays

    spec = BlockSpec(**table)
    ratio = overlays._mlp_ratio(table)
    assert ratio == spec.mlp_width / spec.d_model
    assert ratio * table["d_model"] == table.get(
        "d_ff", table["d_model"] * table.get("mlp_ratio", 4)
    )
    with pytest.raises(ConfigError, match=r"block\.d_ff"):
        overlays._mlp_ratio({**table, "d_ff": 100, "mlp_ratio": 3})
