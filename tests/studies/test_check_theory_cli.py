"""`simlab check-theory` as a command (table, --json, figures, --from-json re-scoring with the
stored criterion) and the Claim registry open to plugins."""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np
import pytest

from simlab.cli import check_theory as check_theory_cli
from simlab.errors import ConfigError
from simlab.studies import check_theory
from simlab.studies.check_theory import (
    rem_entropy,
)
from simlab.studies.check_theory.claim import Claim, Comparison
from simlab.studies.check_theory.common import index_16x_smaller

KEY = jax.random.PRNGKey(0)


# ------------------------------------------------------------------------------ command
TINY_LOG2_T = [4, 6, 8]
TINY_REM = f"""[quick]
tol = 0.05
lead_tol = 0.15
min_shrink = 1.1
log2_T = {TINY_LOG2_T}
x_max = 2.0
x_points = 9
row_budget = 4096
min_rows = 8
seed = 0
"""


def test_cli_tiny_run_prints_table_json_and_figure(tmp_path, capsys):
    """The command end to end at tiny sizes, read from its own config dir (--config-dir)."""
    (tmp_path / "theory_rem_entropy.toml").write_text(TINY_REM)
    parser = argparse.ArgumentParser()
    check_theory_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--quick",
            "--claims",
            "rem_entropy",
            "--config-dir",
            str(tmp_path),
            "--figures-dir",
            str(tmp_path / "fig"),
            "--json",
            str(tmp_path / "out.json"),
        ]
    )
    assert check_theory_cli.cli_main(args) == 0
    out = capsys.readouterr().out
    assert "1 rem_entropy" in out and "verdict" in out and "wall time" in out
    assert (tmp_path / "fig" / "theory_rem_entropy.png").stat().st_size > 10_000
    payload = json.loads((tmp_path / "out.json").read_text())
    assert [c["claim"] for c in payload["claims"]] == ["1 rem_entropy"]


# small T with many rows: the finite-T prediction's Poissonization bias (~1/(2T)) stands out of
# the sampling noise, so the largest size's error is > 0 and the criterion's edges can be probed
TINY_REM_RESOLVED = TINY_REM.replace(f"log2_T = {TINY_LOG2_T}", "log2_T = [2, 3, 4]").replace(
    "row_budget = 4096", "row_budget = 1048576"
)


def _tiny_rem_json(tmp_path, text: str = TINY_REM) -> tuple[str, dict]:
    """A tiny claim-1 run through the command with --json (figures off): what it printed and
    the payload it wrote."""
    (tmp_path / "theory_rem_entropy.toml").write_text(text)
    out = _cli(
        "--quick",
        "--claims",
        "rem_entropy",
        "--config-dir",
        str(tmp_path),
        "--no-figures",
        "--json",
        str(tmp_path / "run.json"),
    )
    return out, json.loads((tmp_path / "run.json").read_text())


def _cli(*argv) -> str:
    """`simlab check-theory ARGV` in process; returns what it printed."""
    import contextlib
    import io

    parser = argparse.ArgumentParser()
    check_theory_cli.add_arguments(parser)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert check_theory_cli.cli_main(parser.parse_args(list(argv))) == 0
    return buf.getvalue()


CELLS = ("claim", "sizes", "predicted", "simulated", "error", "shrinks", "verdict")


def test_from_json_rescores_to_the_same_table(tmp_path):
    """--from-json runs compare and verdict again on the config and simulation data stored by
    --json (no simulation) and redraws the figure: the same table and detail rows as the run
    itself, bit for bit (the run compares its data as it reads back from JSON)."""
    out, payload = _tiny_rem_json(tmp_path)
    (stored,) = payload["claims"]
    assert stored["name"] == "rem_entropy" and stored["config"]["tol"] == 0.05
    assert set(stored["simulation"]) == {"x", "T", "rows", "mean", "std"}
    again = _cli("--from-json", str(tmp_path / "run.json"), "--figures-dir", str(tmp_path / "f"))
    assert payload["table"] in out and payload["table"] in again
    assert (tmp_path / "f" / "theory_rem_entropy.png").stat().st_size > 10_000
    (r,) = check_theory.rescore_json(tmp_path / "run.json")
    assert [getattr(r, c) for c in CELLS] == [stored[c] for c in CELLS]
    assert [list(d) for d in r.details] == stored["details"]
    assert r.seconds == stored["seconds"]


def test_rescoring_applies_the_criterion_stored_with_the_run(tmp_path):
    """The verdict follows the criterion in the stored config, exactly (verdict_from): with tol
    equal to the largest size's error (the finite-T prediction's) it agrees; with tol one ulp below
    and lead_tol equal to it, agreement to leading order needs the declared shrink (min_shrink
    0: yes; above the measured factor: no); with both one ulp below it does not agree.  The
    cells before the "shrinks" one (which reads min_shrink too) do not move."""
    _, payload = _tiny_rem_json(tmp_path, TINY_REM_RESOLVED)
    (r0,) = check_theory.rescore_json(tmp_path / "run.json")
    e = r0.data["fin_err"][-1]
    assert e > 0
    below = float(np.nextafter(e, 0.0))
    shrink = r0.data["fin_err"][index_16x_smaller([2, 3, 4])] / e
    cases = [
        (dict(tol=e), "agrees"),
        (dict(tol=below, lead_tol=e, min_shrink=0.0), "agrees to leading order"),
        (dict(tol=below, lead_tol=e, min_shrink=float(np.nextafter(shrink, 2 * shrink))), None),
        (dict(tol=below, lead_tol=below), None),
    ]
    for change, want in cases:
        entry = json.loads(json.dumps(payload))
        entry["claims"][0]["config"].update(change)
        (tmp_path / "edited.json").write_text(json.dumps(entry))
        (r,) = check_theory.rescore_json(tmp_path / "edited.json")
        assert r.verdict == (want or "does not agree"), change
        rule = dict(r.details)["criterion (finite-T prediction, nats)"]
        assert f"<= {change['tol']:g} agrees" in rule
        assert [getattr(r, c) for c in CELLS[:5]] == [getattr(r0, c) for c in CELLS[:5]]


def test_from_json_refuses_a_file_without_simulations(tmp_path):
    _, payload = _tiny_rem_json(tmp_path)
    del payload["claims"][0]["simulation"]
    (tmp_path / "old.json").write_text(json.dumps(payload))
    with pytest.raises(ConfigError, match="simulation"):
        check_theory.rescore_json(tmp_path / "old.json")


# --------------------------------------------------------------------- the Claim registry
def _toy_claim(name: str = "toy", **fields) -> Claim:
    """A claim of four trivial functions (a plugin's shape)."""

    def simulate(cfg):
        return {"x": np.arange(2.0) * cfg["scale"]}

    def compare(cfg, data):
        err = abs(data["x"][1] - 1.0)
        return Comparison("n=2", "1", f"{data['x'][1]:g}", f"{err:g}", "n/a", scores={"e": err})

    def verdict(cfg, comparison):
        ok = comparison.scores["e"] <= cfg["tol"]
        return ("agrees" if ok else "does not agree"), ("criterion", f"tol {cfg['tol']:g}")

    def figure(result, path):
        path.write_text(result.verdict)

    return Claim(name, "a toy claim", simulate, compare, verdict, figure, **fields)


@pytest.fixture
def registry():
    """CLAIMS, restored as it was after the test (what the test registered is removed)."""
    saved = list(check_theory.CLAIMS)
    yield check_theory.CLAIMS
    for name in [n for n in check_theory.CLAIMS if n not in saved]:
        check_theory.CLAIMS.unregister(name)
    assert list(check_theory.CLAIMS) == saved


def test_register_refuses_a_name_already_taken(registry):
    with pytest.raises(ConfigError, match="theory claim 'rem_entropy': the name is taken"):
        check_theory.register(_toy_claim("rem_entropy"))
    assert registry["rem_entropy"] is rem_entropy.CLAIM
    check_theory.register(_toy_claim())
    with pytest.raises(ConfigError, match="theory claim 'toy': the name is taken"):
        check_theory.register(_toy_claim())


def test_register_refuses_a_missing_or_non_callable_function(registry):
    import dataclasses

    for field in ("simulate", "compare", "verdict", "figure"):
        for bad in (None, "not a function"):
            claim = dataclasses.replace(_toy_claim(), **{field: bad})
            with pytest.raises(ConfigError, match=f"claim 'toy': {field} must be callable"):
                check_theory.register(claim)
    for field in ("name", "title"):
        with pytest.raises(ConfigError, match=f"{field} must be a non-empty string"):
            check_theory.register(dataclasses.replace(_toy_claim(), **{field: " "}))
    with pytest.raises(ConfigError, match="name must be a non-empty string"):
        check_theory.register(dataclasses.replace(_toy_claim(), name=" toy"))
    with pytest.raises(ConfigError, match="expected a Claim"):
        check_theory.register(rem_entropy)
    assert list(registry) == list(check_theory.CLAIMS) and "toy" not in registry


def test_a_registered_claim_runs_like_the_built_in_ones(registry, tmp_path):
    """A plugin: a Claim with its own TOML, registered, is run by run_checks after the seven
    (numbered 8), its verdict's criterion row first among the details, its simulation stored
    as it reads back from JSON, and it is scored again from a saved run."""
    import dataclasses

    (tmp_path / "toy.toml").write_text("[quick]\nscale = 1.0\ntol = 0.0\n")
    check_theory.register(_toy_claim(config=tmp_path / "toy.toml", label="toy!"))
    (r,) = check_theory.run_checks("quick", ["toy"], figures_dir=tmp_path, log=None)
    number = check_theory.ordered().index("toy") + 1  # after the built-in seven
    assert number >= 8 and (r.claim, r.verdict, r.simulated) == (f"{number} toy!", "agrees", "1")
    assert r.details == [("criterion", "tol 0")] and r.simulation == {"x": [0.0, 1.0]}
    assert (tmp_path / "theory_toy.png").read_text() == "agrees"
    check_theory.write_json(tmp_path / "toy.json", check_theory.json_payload([r], "quick", 0.0))
    payload = json.loads((tmp_path / "toy.json").read_text())
    payload["claims"][0]["simulation"]["x"][1] = 2.0
    (tmp_path / "toy.json").write_text(json.dumps(payload))
    (again,) = check_theory.rescore_json(tmp_path / "toy.json")
    assert (again.simulated, again.verdict) == ("2", "does not agree")
    bad = dataclasses.replace(_toy_claim("bad"), simulate=lambda cfg: {"x": object()})
    with pytest.raises(ConfigError, match="claim 'bad': simulate must return JSON-able data"):
        check_theory.check(bad, {})


def test_format_table_is_fixed_width():
    r = check_theory.ClaimResult("9 x", "t", "s" * 30, "p", "q", "e", "yes", "agrees")
    lines = check_theory.format_table([r]).splitlines()
    assert len(lines) == 4  # header, rule, a wrapped row of two lines
    assert lines[0].startswith("claim") and set(lines[1]) <= {"-", " "}


def test_claim_11s_committed_data_recomputes_the_page():
    """docs/theory.md's claim 11 result is the committed simulation data
    (figures/data/theory_clamp_gains.json) scored again by the code as it is, verdict
    included: the page's numbers recompute from the repository."""
    from pathlib import Path

    from conftest import doc_block

    root = Path(__file__).resolve().parents[2]
    (r,) = check_theory.rescore_json(root / "figures" / "data" / "theory_clamp_gains.json")
    assert r.verdict == "agrees"
    got = check_theory.format_table([r]) + "\n\n" + check_theory.format_details([r])
    text = (root / "docs" / "theory.md").read_text()
    assert doc_block(text, "claim11") == "```\n" + got + "\n```\n"
