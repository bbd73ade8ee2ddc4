"""Every experiment declares its own seed stream (docs/config.md, `base_seed`): each TOML of
experiments/ with a [sweep] table sets sweep.base_seed, and two experiments share a stream only
where a comment on that line says why."""

from __future__ import annotations

import re
from collections import defaultdict

from simlab.engine.config import experiments_dir
from simlab.engine.tomlio import read_toml

LINE = re.compile(r"^base_seed\s*=\s*(\d+)\s*(#.*)?$", re.M)


def test_every_experiment_declares_its_own_seed_stream():
    streams = defaultdict(list)
    for path in sorted(experiments_dir().glob("*.toml")):
        raw = read_toml(path)
        if "sweep" not in raw:  # theory claims and the training study have their own seeds
            continue
        assert "base_seed" in raw["sweep"], f"{path.name}: [sweep] does not declare base_seed"
        lines = LINE.findall(path.read_text())
        assert len(lines) == 1, f"{path.name}: expected one base_seed line, found {len(lines)}"
        value, comment = lines[0]
        assert int(value) == raw["sweep"]["base_seed"]
        streams[int(value)].append((path.name, comment))
    assert len(streams) >= 3  # the committed experiments' stream 0 and new ones
    for value, users in streams.items():
        if len(users) > 1:
            silent = [name for name, comment in users if not comment.strip("# ")]
            assert not silent, f"base_seed {value} shared without a comment saying why: {silent}"
