"""`simlab reproduce` at tiny sizes, the second half of the experiment configs
(reproduce_tiny.HALVES; the first half in tests/studies/test_reproduce.py: a file of its own so
that `--dist loadfile` runs the two halves on two workers at once)."""

import pytest
from reproduce_tiny import HALVES, check_experiment_tiny


@pytest.mark.slow
@pytest.mark.parametrize("name", HALVES[1])
def test_experiment_tiny(name, tmp_path):
    """Each experiment TOML at tiny sizes: its declared figures drawn, its data reloadable at
    the sizes asked for, and the experiment's own facts (reproduce_tiny.SPECIFIC)."""
    check_experiment_tiny(name, tmp_path)
