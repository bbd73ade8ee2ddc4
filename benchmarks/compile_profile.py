"""Where the test suite's time goes in jax: a pytest plugin that sums jax's own monitoring events
(jax.monitoring) per test file and per compiled function, over every xdist worker:

    SIMLAB_TEST_CACHE=off python -m pytest -p benchmarks.compile_profile

prints, after the run, the seconds of backend compiling (XLA; a program loaded from the
persistent cache counts here too, with its load time), of tracing and of lowering, and the files
and the functions that compile the most. Subprocesses that tests start are not counted. Each
worker writes its events to $SIMLAB_COMPILE_PROFILE (default: a temporary directory, removed
after the summary; a directory you name is kept, so name an empty one: the summary reads every
JSON in it).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ENV = "SIMLAB_COMPILE_PROFILE"
COMPILE = "/jax/core/compile/backend_compile_duration"
EVENTS = {
    COMPILE: "backend compile",
    "/jax/core/compile/jaxpr_trace_duration": "tracing",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
}
HITS = "/jax/compilation_cache/cache_hits"

_records: list[tuple[str, str, float, str]] = []  # (test file, event, seconds, function)
_hits: collections.Counter = collections.Counter()  # test file -> programs loaded from the cache
_current = {"file": "(outside tests)"}
_own_dir: list[str] = []  # the directory this process created (the controller's)


def _on_duration(event: str, seconds: float, **kw) -> None:
    if event in EVENTS:
        _records.append((_current["file"], event, float(seconds), str(kw.get("fun_name", "?"))))


def _on_event(event: str, **kw) -> None:
    if event == HITS:
        _hits[_current["file"]] += 1


def pytest_configure(config):
    import jax.monitoring

    if not os.environ.get(ENV):  # the controller (or a plain run): workers inherit it
        os.environ[ENV] = tempfile.mkdtemp(prefix="simlab-compile-profile-")
        _own_dir.append(os.environ[ENV])
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current["file"] = item.nodeid.split("::")[0]
    yield
    _current["file"] = "(outside tests)"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    directory = Path(os.environ[ENV])
    directory.mkdir(parents=True, exist_ok=True)  # a directory the user named may not exist yet
    (directory / f"{name}.json").write_text(json.dumps({"records": _records, "hits": dict(_hits)}))


def summary(directory: str | Path, top: int = 10) -> list[str]:
    """The report's lines from every process's JSON in `directory`."""
    records, hits = [], collections.Counter()
    for f in sorted(Path(directory).glob("*.json")):
        data = json.loads(f.read_text())
        records += data["records"]
        hits.update(data["hits"])
    if not records:
        return ["compile profile: no jax events recorded"]
    total = collections.Counter()
    count = collections.Counter()
    by_file, by_fun, fun_n = collections.Counter(), collections.Counter(), collections.Counter()
    for file, event, s, fun in records:
        total[event] += s
        count[event] += 1
        if event == COMPILE:
            by_file[file] += s
            by_fun[fun] += s
            fun_n[fun] += 1
    lines = ["compile profile (jax.monitoring; subprocesses not counted):"]
    for event, label in EVENTS.items():
        extra = ""
        if event == COMPILE:
            extra = f", {count[event]} programs ({sum(hits.values())} loaded from the cache)"
        lines.append(f"  {label:16s} {total[event]:8.1f} s{extra}")
    lines.append(f"  backend compile by test file (top {top}):")
    lines += [f"    {s:7.1f} s  {f}" for f, s in by_file.most_common(top)]
    lines.append(f"  backend compile by function (top {top}):")
    lines += [f"    {s:7.1f} s  {fun_n[f]:5d} x  {f}" for f, s in by_fun.most_common(top)]
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    directory = os.environ.get(ENV)
    for line in summary(directory):
        terminalreporter.write_line(line)
    if _own_dir:
        shutil.rmtree(_own_dir[0], ignore_errors=True)
