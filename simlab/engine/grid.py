"""The grid of a sweep: its axes ([[axes]] tables and the [points] table), the law by which an
axis sets each of its knobs, and the adaptive refinement of a level set ([refine]) over them
(docs/config.md; docs/design.md, "Flow of one sweep").

  [[axes]]   name, knobs (default [name]), and either space = "log" | "lin" with start, stop,
             num, or values = [...]: distinct values, ascending or descending (kept in the
             order given); num = 1 needs start == stop. `knobs` may instead be a table giving
             each knob its own function of the coordinate x: {coef, power} (c x^p) or a list of
             values (one per coordinate; without values or space the coordinate is the index)
  [points]   an explicit list of knob points: knob = [values...] of equal length (and an
             optional name, default "point"): an axis of per-knob lists, put before the others
  [refine]   metric, level, levels, axes, rule, select (layer: its sugar): adaptive refinement
             of the level set
             metric = level (simlab.engine.refine)
Every check names the field (e.g. "axes[1].stop") and raises simlab.errors.ConfigError.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from simlab import validate
from simlab.core import knobs as knob_registry
from simlab.core.lab import dimension_names
from simlab.engine.rules import RULES
from simlab.errors import ConfigError

AXIS_FIELDS = ("name", "knobs", "space", "start", "stop", "num", "values")
# Dimensions the results add themselves: no axis may take their names (nor a metric dimension's,
# `reserved_dims`).
RESERVED_DIMS = ("seed",)
# Sizes of a grid (each far beyond any sweep that fits a machine; the memory preflight,
# simlab.engine.sweep, refuses what does not fit long before these).
MAX_AXES = 8
MAX_AXIS_POINTS = 1 << 20
# Fields of a knob's law on an axis (c x^p); a list of values is the other form.
LAW_FIELDS = ("coef", "power")
# refine.<name> = I for these names is sugar for refine.select = {<name> = I} (and kept so in the
# resolved config, so the fingerprint of a sweep written with it stays)
REFINE_DIM_SUGAR = ("layer",)
REFINE_FIELDS = ("metric", "level", "levels", "axes", "rule", "select", *REFINE_DIM_SUGAR)
# "mean": refine a cell whose corners straddle the level in the seed mean; "any": in the seed
# mean or in any single seed (simlab.engine.refine).
MAX_REFINE_LEVELS = 16
# Points of a refinement's finest lattice (its bookkeeping arrays are this long).
MAX_LATTICE_POINTS = 1 << 26


@dataclasses.dataclass(frozen=True)
class Law:
    """How an axis sets one knob from its coordinate x: the value list `values` (one per
    coordinate) when given, else coef * x ** power (float64, np.power)."""

    coef: float = 1.0
    power: float = 1.0
    values: tuple[float, ...] | None = None

    def apply(self, x: tuple[float, ...]) -> tuple[float, ...]:
        if self.values is not None:
            return self.values
        if (self.coef, self.power) == (1.0, 1.0):
            return tuple(x)
        with np.errstate(all="ignore"):  # x <= 0 with some powers: inf or nan, refused later
            return tuple((self.coef * np.power(np.asarray(x, np.float64), self.power)).tolist())

    def to_config(self) -> Any:
        if self.values is not None:
            return list(self.values)
        return {"coef": self.coef, "power": self.power}


@dataclasses.dataclass(frozen=True)
class Axis:
    """One named grid axis driving one or more knobs.

    space: "log" | "lin" (values from start, stop, num), "values" (an explicit list) or
    "index" (coordinates 0..n-1, for per-knob value lists without coordinates). laws: None
    when every knob takes the coordinate itself, else one Law per knob (aligned with knobs).
    """

    name: str
    knobs: tuple[str, ...]
    space: str
    values: tuple[float, ...]
    start: float | None = None
    stop: float | None = None
    num: int | None = None
    laws: tuple[Law, ...] | None = None

    def knob_values(self) -> dict[str, tuple[float, ...]]:
        """Knob -> its value at each coordinate (float64)."""
        if self.laws is None:
            return {k: self.values for k in self.knobs}
        return {k: law.apply(self.values) for k, law in zip(self.knobs, self.laws)}

    def to_dict(self) -> dict[str, Any]:
        """The axis as a config table (loadable again by `parse_axis`)."""
        knobs: Any = list(self.knobs)
        if self.laws is not None:
            knobs = {k: law.to_config() for k, law in zip(self.knobs, self.laws)}
        d: dict[str, Any] = {"name": self.name, "knobs": knobs}
        if self.space == "values":
            d["values"] = list(self.values)
        elif self.space != "index":
            d.update(space=self.space, start=self.start, stop=self.stop, num=self.num)
        return d

    def describe(self) -> dict[str, Any]:
        """{name, knobs, space, values} (and knob_values when a knob is not the coordinate
        itself): the entry of meta.json's "axes" list."""
        d = {
            "name": self.name,
            "knobs": list(self.knobs),
            "space": self.space,
            "values": list(self.values),
        }
        if self.laws is not None:
            d["knob_values"] = {k: list(v) for k, v in self.knob_values().items()}
        return d


@dataclasses.dataclass(frozen=True)
class Refine:
    """The [refine] table: refine the cells of the grid of `axes` whose corners straddle
    metric = level (rule "mean": in the seed mean; "any": in the mean or in any seed), `levels`
    times, halving the cells each time (simlab.engine.refine). select: the index along each of
    the metric's further dimensions it is read at ((name, index) pairs; a dimension not named:
    its last index); sugar: the names of `select` given as refine.<name> (REFINE_DIM_SUGAR)."""

    metric: str
    level: float
    levels: int
    axes: tuple[str, ...]
    rule: str = "mean"
    select: tuple[tuple[str, int], ...] = ()
    sugar: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = {
            "metric": self.metric,
            "level": self.level,
            "levels": self.levels,
            "axes": list(self.axes),
            "rule": self.rule,
        }
        table = {k: v for k, v in self.select if k not in self.sugar}
        d.update({k: v for k, v in self.select if k in self.sugar})
        if table:
            d["select"] = table
        return d


def reserved_dims() -> tuple[str, ...]:
    """The names no axis may take: "seed" and every registered metric dimension (read live:
    simlab.core.lab.dimension_names)."""
    return RESERVED_DIMS + dimension_names()


def parse_axis(d: Any, where: str) -> Axis:
    """Validate one [[axes]] table; every knob value is checked against the knob's range."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: must be a table, got {d!r}")
    validate.check_fields(where, d, AXIS_FIELDS)
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: must be a non-empty string, got {name!r}")
    if name in reserved_dims():
        raise ConfigError(
            f"{where}.name: {name!r} is reserved for the results' own dimension; "
            f"reserved: {', '.join(reserved_dims())}"
        )
    knobs = d.get("knobs", [name] if name in knob_registry.KNOBS else None)
    if knobs is None:
        raise ConfigError(
            f"{where}.knobs: required because {name!r} is not a knob; "
            f"knobs: {', '.join(knob_registry.KNOBS)}"
        )
    laws = None
    if isinstance(knobs, Mapping):
        if not knobs:
            raise ConfigError(f"{where}.knobs: must name at least one knob")
        knobs, laws = tuple(knobs), _laws(knobs, lambda k: f"{where}.knobs.{k}")
    if isinstance(knobs, str) or not isinstance(knobs, (list, tuple)) or not knobs:
        raise ConfigError(
            f"{where}.knobs: must be a non-empty list of knob names or a table knob -> "
            f"{{coef, power}} or [values], got {knobs!r}"
        )
    for k in knobs:
        if k not in knob_registry.KNOBS:
            raise ConfigError(
                f"{where}.knobs: unknown knob {k!r}; allowed: {', '.join(knob_registry.KNOBS)}"
            )
    if len(set(knobs)) != len(knobs):
        raise ConfigError(f"{where}.knobs: repeated knob in {list(knobs)}")
    listed = [len(law.values) for law in laws or () if law.values is not None]
    start, stop, num = d.get("start"), d.get("stop"), d.get("num")
    if "values" in d:
        extra = [k for k in ("space", "start", "stop", "num") if k in d]
        if extra:
            raise ConfigError(
                f"{where}.{extra[0]}: give either values or space/start/stop/num, not both"
            )
        values = as_number_list(d["values"])
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(
                f"{where}.values: must be a non-empty list of numbers, got {values!r}"
            )
        if len(values) > MAX_AXIS_POINTS:
            raise ConfigError(
                f"{where}.values: {len(values)} values; at most {MAX_AXIS_POINTS} per axis"
            )
        space = "values"
    elif "space" not in d and listed:
        space, values = "index", list(range(listed[0]))
    else:
        space = d.get("space")
        if space not in ("log", "lin"):
            raise ConfigError(
                f"{where}.space: {space!r} is not one of 'log', 'lin' (or give values = [...])"
            )
        num = validate.check_int(f"{where}.num", num, 1, MAX_AXIS_POINTS)
        for field, v in (("start", start), ("stop", stop)):
            if v is None:
                raise ConfigError(f"{where}.{field}: required for space = {space!r}")
            if space == "log":
                validate.check_positive(f"{where}.{field}", v)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{where}.{field}: must be a finite number, got {v!r}")
        start, stop = float(start), float(stop)
        if num == 1 and start != stop:
            raise ConfigError(
                f"{where}.num: 1 point needs start == stop (got {start:g} and {stop:g}); "
                "give values = [x] for a single value"
            )
        values = axis_coordinates(space, start, stop, num)
    if laws is None:
        for k in knobs:
            for v in values:
                knob_registry.check_knob(k, v, where)
    else:
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{where}.values: {v!r} is not a finite number")
    values = tuple(float(v) for v in values)
    for k, n in zip(knobs, [len(law.values) if law.values else None for law in laws or ()]):
        if n is not None and n != len(values):
            raise ConfigError(
                f"{where}.knobs.{k}: {n} values; the axis has {len(values)} coordinates "
                "(every knob's list as long as the axis)"
            )
    axis = Axis(name, tuple(knobs), space, values, start, stop, num, laws)
    if laws is not None:
        check_axis_knobs(axis, where)
    if len(set(values)) != len(values):
        dup = next(v for v in values if values.count(v) > 1)
        raise ConfigError(
            f"{where}: the value {dup:g} appears more than once; an axis needs distinct values "
            "(for lin/log: start != stop when num > 1)"
        )
    return axis


def axis_coordinates(space: str, start: float, stop: float, num: int) -> list[float]:
    """The coordinates of a lin or log axis: np.linspace or np.geomspace(start, stop, num)."""
    grid = np.geomspace if space == "log" else np.linspace
    return grid(start, stop, num).tolist()


def check_axis_knobs(axis: Axis, where: str) -> None:
    """Every knob value of the axis finite and inside its knob's range (ConfigError naming the
    field)."""
    for k, vals in axis.knob_values().items():
        at = where if axis.laws is None else f"{where}.knobs.{k}"
        for x, v in zip(axis.values, vals):
            if not math.isfinite(v):
                raise ConfigError(f"{at}: not finite at the coordinate {x:g} (got {v!r})")
            knob_registry.check_knob(k, v, at)


def _laws(table: Mapping[str, Any], where: Callable[[str], str]) -> tuple[Law, ...] | None:
    """One Law per knob of a knobs table ({coef, power} or a list of values); None when every
    knob is the coordinate itself (the same sweep, and fingerprint, as a list of knob names)."""
    laws = []
    for k, spec_ in table.items():
        at = where(k)
        if isinstance(spec_, (list, tuple)):
            if not spec_:
                raise ConfigError(f"{at}: an empty list of values")
            if len(spec_) > MAX_AXIS_POINTS:
                raise ConfigError(f"{at}: {len(spec_)} values; at most {MAX_AXIS_POINTS}")
            for v in spec_:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ConfigError(f"{at}: {v!r} is not a finite number")
            laws.append(Law(values=tuple(float(v) for v in spec_)))
        elif isinstance(spec_, Mapping):
            for f in spec_:
                if f not in LAW_FIELDS:
                    raise ConfigError(
                        f"{at}.{f}: unknown field; allowed: {', '.join(LAW_FIELDS)} "
                        "(the knob is coef * x^power)"
                    )
            c, p = spec_.get("coef", 1.0), spec_.get("power", 1.0)
            for f, v in (("coef", c), ("power", p)):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ConfigError(f"{at}.{f}: must be a finite number, got {v!r}")
            laws.append(Law(float(c), float(p)))
        else:
            raise ConfigError(
                f"{at}: must be a list of values or a table {{coef, power}} "
                f"(knob = coef * x^power), got {spec_!r}"
            )
    if all(law == Law() for law in laws):
        return None
    return tuple(laws)


def parse_points(d: Mapping[str, Any]) -> Axis:
    """The [points] table: knob = [values...] (equal lengths) and an optional name (default
    "point"): an axis of per-knob value lists whose coordinate is the point's index."""
    name = d.get("name", "point")
    if not isinstance(name, str) or not name or name in reserved_dims():
        raise ConfigError(
            "points.name: must be a non-empty string other than "
            f"{', '.join(reserved_dims())}, got {name!r}"
        )
    lists = {k: v for k, v in d.items() if k != "name"}
    if not lists:
        raise ConfigError("points: name at least one knob with its list of values")
    for k, v in lists.items():
        if k not in knob_registry.KNOBS:
            raise ConfigError(
                f"points.{k}: unknown knob; allowed: name, {', '.join(knob_registry.KNOBS)}"
            )
        if not isinstance(v, (list, tuple)):
            raise ConfigError(f"points.{k}: must be a list of values (one per point), got {v!r}")
    laws = _laws(lists, lambda k: f"points.{k}")
    n = {k: len(v) for k, v in lists.items()}
    if len(set(n.values())) != 1:
        raise ConfigError(
            "points: the knobs' lists differ in length ("
            + ", ".join(f"{k} {m}" for k, m in n.items())
            + "); one value per point for every knob"
        )
    count = next(iter(n.values()))
    axis = Axis(name, tuple(lists), "index", tuple(float(i) for i in range(count)), laws=laws)
    check_axis_knobs(axis, "points")
    return axis


def parse_refine(d: Mapping[str, Any], axes: tuple[Axis, ...]) -> Refine:
    """Validate the [refine] table against the axes: the refined axes lin or log with at least
    two coordinates (their knobs given by the coordinate or a power law), every other axis a
    single value, and a finest lattice of at most MAX_LATTICE_POINTS points."""
    validate.check_fields("refine", d, REFINE_FIELDS)
    metric = d.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"refine.metric: must be a metric name, got {metric!r}")
    level = d.get("level")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not math.isfinite(level):
        raise ConfigError(f"refine.level: must be a finite number, got {level!r}")
    levels = validate.check_int("refine.levels", d.get("levels"), 1, MAX_REFINE_LEVELS)
    rule = validate.check_choice("refine.rule", d.get("rule", "mean"), tuple(RULES))
    table = d.get("select", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"refine.select: must be a table {{dim = index}}, got {table!r}")
    sugar = tuple(k for k in REFINE_DIM_SUGAR if d.get(k) is not None)
    both = [(f"refine.select.{k}", k, v) for k, v in table.items()]
    both += [(f"refine.{k}", k, d[k]) for k in sugar]
    select = []
    for where, k, v in both:
        if any(k == s for s, _ in select):
            raise ConfigError(f"{where}: {k!r} is selected twice")
        select.append((k, validate.check_int(where, v, -(1 << 16), 1 << 16)))
    names = [a.name for a in axes]
    default = [a.name for a in axes if len(a.values) > 1]
    chosen = d.get("axes", default)
    if isinstance(chosen, str) or not isinstance(chosen, (list, tuple)) or not chosen:
        raise ConfigError(f"refine.axes: must be a non-empty list of axis names, got {chosen!r}")
    for n in chosen:
        if n not in names:
            raise ConfigError(f"refine.axes: {n!r} is not an axis; axes: {', '.join(names)}")
    if len(set(chosen)) != len(chosen):
        raise ConfigError(f"refine.axes: repeated axis in {list(chosen)}")
    lattice = 1
    for a in axes:
        if a.name not in chosen:
            if len(a.values) != 1:
                raise ConfigError(
                    f"refine.axes: axis {a.name!r} has {len(a.values)} values; an axis that is "
                    "not refined must have one value"
                )
            continue
        if a.space not in ("lin", "log") or len(a.values) < 2:
            raise ConfigError(
                f"refine.axes: axis {a.name!r} must be space = 'lin' or 'log' with num >= 2 "
                "(its coordinates are subdivided)"
            )
        if any(law.values is not None for law in a.laws or ()):
            raise ConfigError(
                f"refine.axes: axis {a.name!r} sets a knob from a list of values; a refined "
                "axis needs each knob as the coordinate or a power law of it"
            )
        lattice *= (len(a.values) - 1) * 2**levels + 1
    if lattice > MAX_LATTICE_POINTS:
        raise ConfigError(
            f"refine.levels: {levels} levels make a finest lattice of {lattice} points; "
            f"at most {MAX_LATTICE_POINTS}"
        )
    ordered = tuple(n for n in names if n in chosen)
    return Refine(metric, float(level), levels, ordered, rule, tuple(select), sugar)


def as_number_list(values: Any) -> Any:
    """A numpy array or any non-string sequence of numbers as a list of Python numbers (the
    Python API takes np.linspace(...) where a TOML file has a list); anything else unchanged,
    for the caller's own error."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        return values.tolist()
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes, list, tuple)):
        return list(values)
    if isinstance(values, (list, tuple)):
        return [v.item() if isinstance(v, np.generic) else v for v in values]
    return values


def check_axes(axes: tuple[Axis, ...], fixed: Mapping[str, Any]) -> None:
    """Axis names unique; each knob driven by at most one axis and not also fixed in [knobs]."""
    seen_names: dict[str, int] = {}
    driver: dict[str, str] = {}
    for i, a in enumerate(axes):
        if a.name in seen_names:
            raise ConfigError(
                f"axes[{i}].name: {a.name!r} is already the name of axes[{seen_names[a.name]}]"
            )
        seen_names[a.name] = i
        for k in a.knobs:
            if k in driver:
                raise ConfigError(
                    f"axes[{i}].knobs: knob {k!r} is already driven by axis {driver[k]!r}"
                )
            driver[k] = a.name
    for k in fixed:
        if k in driver:
            raise ConfigError(f"knobs.{k}: is driven by axis {driver[k]!r}; remove it from [knobs]")
