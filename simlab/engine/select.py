"""Which coordinate of a sweep axis a value selects: the nearest one, measured on the axis's own
scale. One rule for `simlab plot --select AXIS=VALUE` (simlab.plot) and for a figure's
`select = {axis = value}` (simlab.studies.reproduce), so both cut a sweep at the same point.

An axis is logarithmic when meta.json records space "log", linear when it records "lin", and
for an explicit list of values (or a sweep without that record) when its coordinates are
log-spaced (`is_log_spaced`). On a log axis the distance is |log(c / v)|, on a linear one
|c - v|: on coordinates 1, 10, 100 the value 40 selects 100 on a log axis (|log 0.4| < |log 4|)
and 10 on a linear one (30 < 60).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def is_log_spaced(c: Sequence[float]) -> bool:
    """True when the coordinates look geometric rather than arithmetic.

    Rule: all coordinates positive and finite, and
      n >= 3: the steps in log c are more uniform than the steps in c (coefficient of variation
              of |diff(log c)| below that of |diff(c)|) and nearly constant (CV < 0.25), so a
              hand-written list like 0.1, 0.3, 1, 3, 10 counts as log;
      n == 2: the two values differ by a factor of 10 or more;
      n <= 1: never.
    """
    c = np.asarray(c, dtype=float).ravel()
    if c.size < 2 or not np.all(np.isfinite(c)) or np.any(c <= 0):
        return False
    c = np.sort(c)
    if c.size == 2:
        return bool(c[1] / c[0] >= 10.0)

    def cv(d):
        d = np.abs(d)
        m = d.mean()
        return np.inf if m == 0 else float(d.std() / m)

    cv_log, cv_lin = cv(np.diff(np.log(c))), cv(np.diff(c))
    return cv_log < 0.25 and cv_log < cv_lin


def axis_is_log(results, name: str) -> bool:
    """Whether axis `name` of a sweep (a simlab.engine.results.Results) is logarithmic: its
    recorded space "log" or "lin", else (explicit values, or no record) `is_log_spaced`."""
    try:
        space = results.axis_space(name)
    except (KeyError, TypeError, AttributeError):
        space = "values"
    if space in ("log", "lin"):
        return space == "log"
    return is_log_spaced(results.axes[name])


def nearest_index(coords: Sequence[float], value: float, log: bool) -> int:
    """Index of the coordinate nearest `value`: argmin_i |log(c_i / value)| when `log` (and the
    value and every coordinate are positive), argmin_i |c_i - value| otherwise; the first of
    equally near ones."""
    c = np.asarray(coords, dtype=float).ravel()
    v = float(value)
    if log and v > 0 and np.all(c > 0):
        return int(np.argmin(np.abs(np.log(c / v))))
    return int(np.argmin(np.abs(c - v)))


def nearest(results, name: str, value: float) -> int:
    """Index of the coordinate of axis `name` nearest `value`, on the axis's own scale."""
    return nearest_index(results.axes[name], value, axis_is_log(results, name))
