"""The answer re-judged with measures that see geometry (docs/gallery.md, "The answer, by
geometry"), from the committed data of experiments/answer_geometry.toml (the headline block and
grid: BERT-base post-LN, d_model 768, both branches, 16 x 512 tokens, N = 0.01 / 0.55 / 10,
lambda = q_scale = k_scale 1 .. 1000, 20 seeds of stream 4001; uniform and Zipf token ids).

    python experiments/gallery_geometry.py [figures/data]      # prints the markdown block
    python experiments/gallery_geometry.py --referee [figures/data]   # the referee's, by geometry

The referee's block is built by experiments/gallery_geometry_referee.py; the covariance
measures' isotropic references at each sweep's n and d, and the one block both sections judge
read at its two n, by experiments/gallery_sample_size.py (issue 50; docs/metrics.md, "Sample
size"). tests/test_docs.py checks that docs/gallery.md carries both outputs on the committed
data, character for character; tests/studies/test_gallery_geometry.py tests the rule below and
the printed reading, test_gallery_sample_size.py the sample-size math against numpy.

Declared before the run (committed with the config, before its data):
  effect      sharpening = the metric at lambda 1000 minus lambda 1, paired by seed, per token
              distribution and drift; seed mean +- the 95% Student-t half-width over the 20
              seeds (simlab.engine.results.seed_ci);
  sizes       beside the absolute change: the change relative to the metric's value at
              lambda 1, and for the added anisotropy (out_cos_gain) its share of the lambda-1
              gain and of the room left, 1 - input_cos (a ceiling cannot hide an effect: at
              N 10 the input's cosine is near 1 and the absolute change is small);
  scale       s = |seed mean at lambda 1| for every metric, except out_cos_gain, whose scale is
              the room left, mean(1 - input_cos);
  floor       F = sqrt(n d) eps32 max(|mean at lambda 1|, |mean at lambda 1000|), n = 16 x 512
              tokens, d = 768, eps32 = 2^-23: the float32 resolution of an n d-term sum (a
              random walk of rounding errors); nothing below it is called an effect;
  material    T = 0.01 s: a change of 1% of the scale (a relative threshold, so the verdict does
              not depend on the metric's units and cannot flip on a 1e-8 difference of a
              quantity whose scale is 1e-4, as the absolute DELTA = 0.005 of gallery_answer.py
              did for the centred cosines between seed streams);
  verdict     "raises" lo > 0, mean >= max(T, F);    "lowers" hi < 0, mean <= -max(T, F);
              "no material effect" -T < lo and hi < T (otherwise); "unresolved" the rest.
              Amended after the uniform run, before reading the Zipf one: commit 6bfe497 also
              had "raises, small" / "lowers, small" for an interval excluding 0 with F <= |mean|
              < T; on the centred cosine (scale 1/(n - 1), T = 1.2e-6, F = 3.6e-8) that called a
              +4.2e-8 change at N 10 "raises, small", the 1e-8 verdict this rule exists to
              prevent. An effect below 1% of its scale now reads "no material effect", its
              number printed beside it; the rest of the rule is as declared.
  closed forms, per seed (post-LN output, LayerNorm gain 1 and bias 0 at BERT init): every
              token has |y_i|^2 = d (1 - O(eps_LN)), so |ybar|^2 + variance = d exactly (the
              common and private parts trade one for the other), and the mean pairwise cosine of
              equal-norm tokens is (n c - 1) / (n - 1), c = |ybar|^2 / mean |y_i|^2 (the common
              share): printed as the largest deviation over seeds and lambdas.
"""

import math
import sys
from pathlib import Path

import numpy as np

import simlab
from simlab.engine.results import seed_ci

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gallery_sample_size as sample_size  # noqa: E402  (covariance measures at a stated n)

VARIANTS = (("uniform", "uniform token ids"), ("zipf", "Zipf token ids (s = 1.1)"))
REGIMES = (("small drift", 0.01), ("N ~ ‖x‖", 0.55), ("large drift", 10.0))
EPS32 = 2.0**-23
MATERIAL = 0.01
# (metric, what it measures; "+" when larger means more anisotropic, "-" when larger means
# more isotropic)
ROWS = (
    ("out_cos_gain", "added global anisotropy, out_cos - input_cos", "+"),
    ("out_common_share", "common share ‖ybar‖² / mean ‖y‖²", "+"),
    ("out_mean_sq_norm", "common part ‖ybar‖²", "+"),
    ("out_variance", "private parts, the variance", "-"),
    ("out_participation_ratio", "participation ratio of the centred covariance", "-"),
    ("out_cov_effective_rank", "effective rank of the covariance's eigenvalues", "-"),
    ("out_isoscore", "IsoScore", "-"),
    ("out_pc1_share", "variance share of the top direction", "+"),
    ("out_pc10_share", "variance share of the top 10 directions", "+"),
    ("out_partition_iso", "partition isotropy I(W)", "-"),
    ("out_partition_iso_centred", "partition isotropy, centred", "-"),
    ("out_rank1_residual", "rank-one residual ‖Y - 1 ybar^T‖ / ‖Y‖", "-"),
    ("out_cos_centred", "centred mean pairwise cosine", "+"),
)


def floor(n_tokens: int, d: int, a: float, b: float) -> float:
    """The float32 resolution F of the declared rule."""
    return math.sqrt(n_tokens * d) * EPS32 * max(abs(a), abs(b))


def verdict(lo: float, hi: float, mean: float, scale: float, res: float) -> str:
    """The declared verdict (module docstring): T = MATERIAL * scale, F = res."""
    t = MATERIAL * scale
    if lo > 0 and mean >= max(t, res):
        return "raises"
    if hi < 0 and mean <= -max(t, res):
        return "lowers"
    if -t < lo and hi < t:
        return "no material effect"
    return "unresolved"


def verdicts_cli(args: list[str], write, figures, block) -> None:
    """The command line the verdict scripts share (minilm_verdicts.py, smollm2_verdicts.py):
    `--write [DATA]` writes their tables, `--figures [DATA [OUT]]` draws their figures and
    prints each path, else `[DATA]` prints the docs' block (DATA: figures/data, OUT: figures)."""
    data = Path(args[1]) if len(args) > 1 else Path("figures/data")
    if args and args[0] == "--write":
        write(data)
    elif args and args[0] == "--figures":
        for p in figures(data, Path(args[2]) if len(args) > 2 else Path("figures")):
            print(p)
    else:
        print(block(Path(args[0]) if args else Path("figures/data")), end="")


def fmt(x: float) -> str:
    return f"{x:+.4f}" if abs(x) >= 1e-3 else f"{x:+.2e}"


def load(root: Path) -> dict:
    return {v: simlab.load(root / "answer_geometry" / v) for v, _ in VARIANTS}


def _i(values, x) -> int:
    return int(np.argmin(np.abs(np.asarray(values) - x)))


def resolution(res, a, b) -> float:
    """The declared floor F for a change from a to b (per-seed arrays) of a sweep's metric, with
    the sweep's n = B T tokens and d_model."""
    cfg = res.meta["config"]
    n = cfg["inputs"]["batch"] * cfg["inputs"]["length"]
    return floor(n, cfg["block"]["d_model"], float(np.mean(a)), float(np.mean(b)))


def effect(res, metric: str, i: int, layer: int | None = None) -> dict:
    """Sharpening's effect on `metric` at drift index i (the first and last lambda), with its
    sizes and verdict; for a stack (a layer axis after the seeds) at layer `layer`. The
    scale: the room left, mean(1 - input_cos), for out_cos_gain and for a stack's out_cos (the
    anisotropy built by that layer, against the room the stack's input leaves: input_cos at
    layer 0); |mean at lambda 1| for every other metric."""
    a, b = res[metric][i, 0], res[metric][i, -1]
    if layer is not None:
        a, b = a[..., layer], b[..., layer]
    d = b - a
    lo, hi = (float(v) for v in seed_ci(d, -1))
    res_f = resolution(res, a, b)
    if metric == "out_cos_gain" or (metric == "out_cos" and layer is not None):
        x0 = res["input_cos"][i, 0]
        if layer is not None:  # a layer's gain: its own input's room; out_cos: the stack's
            x0 = x0[..., layer if metric == "out_cos_gain" else 0]
        scale = float(np.mean(1.0 - x0))
    else:
        scale = abs(float(np.mean(a)))
    mean = float(np.mean(d))
    return {
        "at1": float(np.mean(a)),
        "mean": mean,
        "half": (hi - lo) / 2,
        "rel": mean / float(np.mean(a)) if np.mean(a) != 0 else math.nan,
        "verdict": verdict(lo, hi, mean, scale, res_f),
        "floor": res_f,
        "scale": scale,
    }


def closed_forms(res) -> tuple[float, float]:
    """Largest deviations over seeds, drifts and lambdas of (|ybar|^2 + variance) / d - 1 and
    of out_cos - (n c - 1) / (n - 1)."""
    cfg = res.meta["config"]
    d = cfg["block"]["d_model"]
    n = cfg["inputs"]["batch"] * cfg["inputs"]["length"]
    norm = np.max(np.abs((res["out_mean_sq_norm"] + res["out_variance"]) / d - 1.0))
    cos = np.max(np.abs(res["out_cos"] - (n * res["out_common_share"] - 1.0) / (n - 1.0)))
    return float(norm), float(cos)


def main(root: Path) -> str:
    data = load(root)
    first = data[VARIANTS[0][0]]
    cfg = first.meta["config"]
    lam = first.axes["lambda"]
    n = cfg["inputs"]["batch"] * cfg["inputs"]["length"]
    lines = [
        f"Sizes: {cfg['block']['kind']}, d_model {cfg['block']['d_model']}, "
        f"{cfg['inputs']['batch']} x {cfg['inputs']['length']} tokens, lambda = q_scale = "
        f"k_scale {lam[0]:g} to {lam[-1]:g} ({len(lam)} values), {first.n_seeds} seeds (stream "
        f"{cfg['sweep']['base_seed']}), token ids uniform and Zipf; effect = lambda "
        f"{lam[-1]:g} minus lambda {lam[0]:g}, paired by seed; verdicts by the rule of "
        f"experiments/gallery_geometry.py (material: {MATERIAL:.0%} of the scale; floor: the "
        "float32 resolution of the sum). Every covariance measure here is of "
        f"{sample_size.sizes(first)}; each is read against its isotropic reference at that n "
        'and d below (docs/metrics.md, "Sample size"), and the one comparison across n, '
        '"One block at two sample sizes", states both.',
        "",
    ]
    for v, label in VARIANTS:
        res = data[v]
        ent = [
            (nn, float(np.mean(res["attn_entropy"][_i(res.axes["drift_norm"], nn), 0])),
             float(np.mean(res["attn_entropy"][_i(res.axes["drift_norm"], nn), -1])))
            for _, nn in REGIMES
        ]  # fmt: skip
        lines += [
            f"**{label}** (H / ln T from lambda {lam[0]:g} to {lam[-1]:g}: "
            + "; ".join(f"N {nn:g} {a:.3f} -> {b:.3f}" for nn, a, b in ent)
            + "):",
            "",
            "| measure of the block output | "
            + " | ".join(f"{name}, N = {nn:g}: at lambda 1; change (relative)" for name, nn in
                         REGIMES)
            + " |",
            "|---|" + "---|" * len(REGIMES),
        ]  # fmt: skip
        for metric, what, _ in ROWS:
            cells = []
            for _, nn in REGIMES:
                e = effect(res, metric, _i(res.axes["drift_norm"], nn))
                cells.append(
                    f"{fmt(e['at1'])}; {fmt(e['mean'])} ± {e['half']:.1e} "
                    f"({e['rel']:+.1%}, {e['verdict']})"
                )
            lines.append(f"| {what} (`{metric}`) | " + " | ".join(cells) + " |")
        gains = []
        for _, nn in REGIMES:
            i = _i(res.axes["drift_norm"], nn)
            g1 = float(np.mean(res["out_cos_gain"][i, 0]))
            dg = float(np.mean(res["out_cos_gain"][i, -1] - res["out_cos_gain"][i, 0]))
            room = float(np.mean(1.0 - res["input_cos"][i, 0]))
            gains.append(
                f"N {nn:g}: {dg / g1:+.1%} of the lambda-1 gain, {dg / room:+.2%} of the room "
                f"left (1 - input_cos = {room:.4f})"
            )
        norm_dev, cos_dev = closed_forms(res)
        lines += [
            "",
            "Sharpening's change of the added anisotropy as a share of what a ceiling leaves: "
            + "; ".join(gains)
            + ".",
            "",
            f"Closed forms, per seed (largest deviation over seeds, drifts and lambdas): "
            f"(|ybar|^2 + variance) / d - 1 = {norm_dev:.1e} (every post-LN token has norm "
            f"sqrt(d), so the common and private parts trade one for the other); out_cos minus "
            f"(n c - 1)/(n - 1) with c the common share = {cos_dev:.1e} (n = {n}: at equal "
            "norms the cosine is the common share, no more).",
            "",
        ]
    lines += sample_size.reference_table(data, VARIANTS, REGIMES, _drift, ROWS)
    lines += ["", *_two_sizes(root, first), "", *_summary(data)]
    return "\n".join(lines).rstrip() + "\n"


def _drift(res, nn: float) -> int:
    return _i(res.axes["drift_norm"], nn)


def _two_sizes(root: Path, answer) -> list[str]:
    """The BERT block at N ~ ‖x‖ with uniform ids, judged here at 16 x 512 tokens and in the
    referee's questions at 4 x 512: both readings at their own n (gallery_sample_size)."""
    bert = simlab.load(root / "referee_geometry" / "bert")
    nn = REGIMES[1][1]
    drifts = [(x, _drift(answer, x), _drift(bert, x)) for _, x in REGIMES]
    return [
        f"**One block at two sample sizes**: the BERT block with uniform token ids at N = {nn:g}, "
        "sharpened from lambda 1 to 1000, is judged here and in \"The referee's questions, by "
        'geometry" at different n:',
        "",
        *sample_size.two_sizes(answer, _drift(answer, nn), bert, _drift(bert, nn), effect, drifts),
    ]


def _direction(metric: str, v: str) -> int:
    """+1 when the verdict makes the output more anisotropic by this measure, -1 less, 0 none."""
    sign = {"raises": 1, "lowers": -1}.get(v, 0)
    return sign if dict((m, o) for m, _, o in ROWS)[metric] == "+" else -sign


PART = {
    "raises": "grows",
    "lowers": "shrinks",
    "no material effect": "does not change materially",
    "unresolved": "is unresolved",
}
PARTS = {
    "raises": "grow",
    "lowers": "shrink",
    "no material effect": "do not change materially",
    "unresolved": "are unresolved",
}


def _views(cos: int, cov: int, what: str = "participation ratio") -> str:
    """How the cosine's direction and the covariance measure's (`what`) compare."""
    if cos == cov == 0:
        return "neither moves materially"
    if cos == cov:
        return "the two views agree"
    if cos == 0 or cov == 0:
        return "only the " + (what if cos == 0 else "cosine") + " moves materially"
    return "the two views point opposite ways"


# the words for each measure the summary names (ROWS' metrics but the three it states first)
NAMES = {
    "out_common_share": "the common share",
    "out_participation_ratio": "the participation ratio",
    "out_cov_effective_rank": "the covariance's effective rank",
    "out_isoscore": "IsoScore",
    "out_pc1_share": "the top direction's share",
    "out_pc10_share": "the top 10 directions' share",
    "out_partition_iso": "the partition isotropy",
    "out_partition_iso_centred": "the centred partition isotropy",
    "out_rank1_residual": "the rank-one residual",
    "out_cos_centred": "the centred cosine",
}


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _rated(e: dict) -> str:
    """Every measure of NAMES grouped by what its verdict says (more anisotropic, less, no
    material change, unresolved), each with its relative change."""
    groups = {"more anisotropic by ": [], "less anisotropic by ": [], "no material change in ": []}
    unresolved = []
    for m, name in NAMES.items():
        item = f"{name} ({e[m]['rel']:+.1%})"
        if e[m]["verdict"] == "unresolved":
            unresolved.append(item)
            continue
        key = {1: "more anisotropic by ", -1: "less anisotropic by "}.get(
            _direction(m, e[m]["verdict"]), "no material change in "
        )
        groups[key].append(item)
    out = [k + _and(v) for k, v in groups.items() if v]
    return "; ".join(out + (["unresolved: " + _and(unresolved)] if unresolved else []))


def _summary(data: dict) -> list[str]:
    """The sentences, each read off the verdicts above: per token distribution and drift, what
    sharpening does to the cosine, the common and the private parts, every other measure of the
    table by its verdict, and whether the cosine (out_cos_gain) and the participation ratio
    read the same direction."""
    out = ["**Read off the verdicts** (sharpening = lambda 1000 minus 1):", ""]
    word = {1: "more anisotropic", -1: "less anisotropic", 0: "no material change"}
    for v, label in VARIANTS:
        res = data[v]
        for _, nn in REGIMES:
            e = {m: effect(res, m, _drift(res, nn)) for m, _, _ in ROWS}
            cos = _direction("out_cos_gain", e["out_cos_gain"]["verdict"])
            cov = _direction("out_participation_ratio", e["out_participation_ratio"]["verdict"])
            common, private = e["out_mean_sq_norm"], e["out_variance"]
            out.append(
                f"- {label}, N = {nn:g}: the cosine reads {word[cos]} (out_cos_gain "
                f"{e['out_cos_gain']['rel']:+.0%} of its lambda-1 value); the common part "
                f"{PART[common['verdict']]} ({common['rel']:+.1%}) and the private parts "
                f"{PARTS[private['verdict']]} ({private['rel']:+.1%}); {_rated(e)}; the cosine "
                f"against the participation ratio: {_views(cos, cov)}."
            )
    return out


def referee(root: Path) -> str:
    """docs/gallery.md's "The referee's questions, by geometry" (experiments/
    gallery_geometry_referee.py, by the rule and words of this module)."""
    import gallery_geometry_referee

    return gallery_geometry_referee.referee(root)


if __name__ == "__main__":
    args = sys.argv[1:]
    which = main
    if "--referee" in args:
        args.remove("--referee")
        which = referee
    print(which(Path(args[0]) if args else Path("figures/data")), end="")
