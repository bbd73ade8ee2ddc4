# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Exploring a sweep
#
# A notebook in jupytext's percent format: open it with Jupyter (`jupytext --to notebook
# docs/explore.py`) or run it as a plain script (`python docs/explore.py`; CI does). It loads
# the committed quick-size data of experiment 1 (BERT post-LN block, drift N x joint q/k
# scale lambda; `simlab reproduce --quick --only paper` wrote it), shows what it holds,
# slices it with xarray and draws a phase diagram and a cut.

# %%
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # a script has no display; in Jupyter the figures show inline
import simlab
from simlab import plot

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd()
OUT = Path("runs/explore")
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## What the sweep holds
# The repr lists the sizes, the seeds, the axes and every metric with its shape and range.

# %%
res = simlab.load(ROOT / "figures/quick/data/paper")
print(res)

# %% [markdown]
# ## Labelled slices with xarray
# `to_xarray()` gives one variable per metric, coordinates per axis and a `seed` dimension;
# `sel` picks by coordinate, `mean("seed")` reduces over seeds.

# %%
ds = res.to_xarray()
cut = ds["out_cos"].sel(drift_norm=1.0, method="nearest").mean("seed")
print(cut.to_series().round(4))
gap = (ds["out_cos"] - ds["input_cos"]).mean("seed")
print(f"largest |out_cos - input_cos| on the map: {float(abs(gap).max()):.4f}")

# %% [markdown]
# ## A phase diagram and a cut
# `simlab.plot.phase_diagram` draws a map (log axes, iso-lines); any matplotlib call works on
# the xarray objects too.

# %%
mean = ds.mean("seed")
entropy = mean["attn_entropy"].transpose("lambda", "drift_norm").values  # (y, x)
fig, _ = plot.phase_diagram(
    res.axes["drift_norm"],
    res.axes["lambda"],
    entropy,
    x_label="drift N",
    y_label="q/k scale lambda",
    z_label="attn_entropy",
    title="attention entropy [quick sizes]",
    contour=entropy,
    contour_levels=[0.5],
)
fig.savefig(OUT / "explore_entropy.png", dpi=80)

# a cut at lambda = 1 with seed bands, by simlab.plot.curves from the xarray selection
at1 = ds.sel({"lambda": 1.0}, method="nearest")
series = {
    name: (at1[name].mean("seed").values, at1[name].std("seed").values)
    for name in ("input_cos", "out_cos", "attn_cos")
}
fig, _ = plot.curves(
    res.axes["drift_norm"],
    series,
    x_label="drift N",
    y_label="cosine",
    title="cut at lambda = 1 [quick sizes]",
)
fig.savefig(OUT / "explore_cut.png", dpi=80)
print(f"figures in {OUT}")
