"""Public names that moved keep their old path for a release, with a DeprecationWarning naming
the new one (simlab.aliases): simlab.checkpoints.series -> simlab.studies.series."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

from simlab import aliases

OLD, NEW = "simlab.checkpoints.series", "simlab.studies.series"


@pytest.fixture
def fresh(monkeypatch):
    """The old path not imported yet in this process (sys.modules restored afterwards)."""
    import simlab.checkpoints

    monkeypatch.delitem(sys.modules, OLD, raising=False)
    monkeypatch.delattr(simlab.checkpoints, "series", raising=False)


@pytest.mark.parametrize("form", ["import", "from_module", "from_package"])
def test_the_old_module_path_imports_the_new_module_and_warns(fresh, form):
    new = importlib.import_module(NEW)
    with pytest.warns(DeprecationWarning, match=f"{OLD} moved to {NEW}") as got:
        if form == "import":
            import simlab.checkpoints.series as old
        elif form == "from_module":
            from simlab.checkpoints.series import series as fn

            old = sys.modules[OLD]
            assert fn is new.series
        else:
            from simlab.checkpoints import series as old
    assert old is new
    assert new.__spec__.name == NEW  # the module keeps its own spec
    assert got[0].filename == __file__  # attributed to the importing line
    assert aliases.MOVED[OLD] == NEW


def test_a_script_sees_the_warning_under_the_default_filters():
    """Python shows a DeprecationWarning by default only for code run as __main__: the warning
    points at the script's import line, so a script's user sees it."""
    r = subprocess.run(
        [sys.executable, "-c", f"import {OLD}"], capture_output=True, text=True, check=True
    )
    assert f"DeprecationWarning: {OLD} moved to {NEW}" in r.stderr


def test_moved_names_gives_each_old_name_with_a_warning(monkeypatch):
    """The module-level __getattr__ for names that left a module: an old name gives the object
    at its new path and warns; any other name is an AttributeError as before."""
    mod = types.ModuleType("simlab_old_home")
    mod.__getattr__ = aliases.moved_names(
        mod.__name__, {"old_sqrt": "math:sqrt", "series": f"{NEW}:series"}
    )
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    with pytest.warns(DeprecationWarning, match="simlab_old_home.old_sqrt moved to math:sqrt"):
        from simlab_old_home import old_sqrt
    assert old_sqrt(9.0) == 3.0
    with pytest.warns(DeprecationWarning):
        assert mod.series is importlib.import_module(NEW).series
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        mod.nothing  # noqa: B018
