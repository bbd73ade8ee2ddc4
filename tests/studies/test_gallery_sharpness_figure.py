"""figures/answer_sharpness.png draws what the README cites it with: the seed mean of each
curve and its 95% interval over the 20 seeds, shaded, from the committed data."""

from pathlib import Path

import numpy as np
from matplotlib.collections import PolyCollection
from scipy import stats

import simlab

from conftest import experiment_script

DATA = Path(__file__).resolve().parents[2] / "figures" / "data"


def test_the_answer_figure_shades_each_curves_95_percent_interval():
    m = experiment_script("gallery_sharpness")
    fig = m.draw(DATA)
    soft = simlab.load(DATA / "decomposition_sharpness")
    clamps = {v: simlab.load(DATA / "decomposition_clamps" / v) for v, _ in m.CLAMPS}
    assert soft.n_seeds == 20
    for ax, branch in zip(fig.axes, (0, 1), strict=True):
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == len(lines := ax.get_lines()) == 4
        for band, line, (label, v) in zip(bands, lines, m.CLAMPS_AND_SOFTMAX, strict=True):
            assert line.get_label() == label
            r = soft if v is None else clamps[v]
            i = int(np.argmin(np.abs(r.axes["drift_norm"] - 0.55)))
            g = np.asarray(r["out_cos_gain"][i, :, branch], dtype=np.float64)  # (points, seeds)
            n = g.shape[-1]
            half = stats.t.ppf(0.975, n - 1) * g.std(-1, ddof=1) / np.sqrt(n)  # the oracle
            np.testing.assert_allclose(line.get_ydata(), g.mean(-1), rtol=1e-6)
            xy = band.get_paths()[0].vertices
            for x, lo, hi in zip(
                line.get_xdata(), g.mean(-1) - half, g.mean(-1) + half, strict=True
            ):
                ys = xy[np.isclose(xy[:, 0], x, rtol=0, atol=1e-12), 1]
                np.testing.assert_allclose([ys.min(), ys.max()], [lo, hi], rtol=1e-5, atol=1e-9)
