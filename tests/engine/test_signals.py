"""SIGTERM (what Slurm, `timeout` and `kill` send) stops `simlab sweep` as Ctrl-C does: the
finished chunks saved and reported, exit 128 + 15 = 143; further signals during the shutdown
(the saving, jax's exit handlers) are ignored, with no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from simlab import cli

# one point per chunk file (as tests/engine/test_promises.py's SLOW_SWEEP): the run outlasts
# the polling for its first chunk file by far
SLOW_SWEEP = (
    '[block]\nd_model = 8\nn_heads = 2\n[inputs]\nkind = "gaussian"\nbatch = 2\n'
    'length = 4\n[[axes]]\nname = "drift_norm"\nspace = "lin"\nstart = 0.0\nstop = 1.0\n'
    "num = 800\n[sweep]\nmicro_batch = 1\nchunk_size = 1\n"
)


def start(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SLOW_SWEEP)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "simlab", "sweep", str(cfg), "--out", str(out), "--quiet"]
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a shell
    )
    deadline = time.time() + 120
    while time.time() < deadline and not any((out / "chunks").glob("*.npz")):
        time.sleep(0.01)
    assert p.poll() is None, "the sweep finished before it could be stopped"
    return p, out


@pytest.mark.slow
@pytest.mark.parametrize("again", [False, True], ids=["once", "signals during the shutdown"])
def test_sigterm_saves_reports_and_exits_143(tmp_path, again):
    p, out = start(tmp_path)
    p.send_signal(signal.SIGTERM)
    if again:  # keep signalling until it has exited: some land in the saving and in jax's atexit
        while p.poll() is None:
            for s in (signal.SIGINT, signal.SIGTERM):
                try:
                    os.kill(p.pid, s)
                except ProcessLookupError:
                    break
            time.sleep(0.005)
    _, err = p.communicate(timeout=60)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("simlab: interrupted")]
    # the first signal handled decides the line and the exit code; with a burst, one that lands
    # after Python's finalization has given the handlers back kills the process (-N, which a
    # shell reports as 128 + N too), still with no traceback
    sigterm = line.startswith("simlab: interrupted (SIGTERM): ")
    assert sigterm or (again and line.startswith("simlab: interrupted: ")), err
    if p.returncode >= 0 or not again:
        assert p.returncode == (143 if sigterm else 130), err
    else:
        assert -p.returncode in (signal.SIGINT, signal.SIGTERM), err
    n = int(line.split(": ")[2].split(" chunk files")[0])
    assert n == len(list((out / "chunks").glob("*.npz"))) >= 1
    assert not (out / ".lock").exists() and not (out / "claims").exists()


def test_a_stop_signal_decides_the_exit_code_and_the_handlers_come_back(capsys, monkeypatch):
    """In-process: SIGTERM while a command runs gives 143 and the line naming it, SIGINT 130
    and the plain line; the caller's handlers are restored afterwards."""
    import simlab.cli.info

    # a process started in the background by a shell without job control inherits SIGINT
    # ignored, and simlab leaves an inherited SIG_IGN alone (cli._catch_stop_signals); this
    # test is about a foreground process, so it gives itself Python's default SIGINT handler
    inherited = signal.getsignal(signal.SIGINT)
    if inherited is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    before = {s: signal.getsignal(s) for s in cli.STOP_SIGNALS}
    for signum, code, head in [
        (signal.SIGTERM, 143, "simlab: interrupted (SIGTERM)"),
        (signal.SIGINT, 130, "simlab: interrupted"),
    ]:

        def command(args, signum=signum):
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises first
            return 0

        monkeypatch.setattr(simlab.cli.info, "cli_main", command)
        t0 = time.perf_counter()
        assert cli.main(["info", "x"]) == code
        assert time.perf_counter() - t0 < 4
        assert capsys.readouterr().err.strip() == head
        assert {s: signal.getsignal(s) for s in cli.STOP_SIGNALS} == before
    signal.signal(signal.SIGINT, inherited)
