"""tools/gpu/hold.sh: a command started in one shell outlives it and is polled from the next; poll reports the log's
new part, the exit status (3 while running), and copies the log and named files to $OUT."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "hold.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("setsid") is None,
                                reason="needs bash and setsid")


def _hold(tmp_path: Path, *args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOLD_DIR": str(tmp_path / "hold")}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_held_command_outlives_its_call_and_is_polled_to_its_end(tmp_path):
    gate, result = tmp_path / "gate", tmp_path / "result.jsonl"
    cmd = f"echo first; while [ ! -f {gate} ]; do sleep 0.1; done; echo second; echo '{{}}' > {result}"
    started = _hold(tmp_path, "start", cmd)
    assert started.returncode == 0 and "hold: started pid" in started.stdout   # the starting shell has exited
    assert _hold(tmp_path, "start", "true").returncode == 2                    # one held command at a time
    out = tmp_path / "out"
    out.mkdir()
    running = _hold(tmp_path, "poll", "1", str(result), out=out)
    assert running.returncode == 3 and "first" in running.stdout and "still running" in running.stdout
    gate.touch()
    done = _hold(tmp_path, "poll", "30", str(tmp_path / "*.jsonl"), out=out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\nsecond\n" in done.stdout and "\nfirst\n" not in done.stdout      # only what the log gained
    assert (out / "result.jsonl").read_text() == "{}\n" and "second" in (out / "hold.log").read_text()


def test_a_failed_command_s_status_is_poll_s_exit_status(tmp_path):
    assert _hold(tmp_path, "start", "echo oops; exit 7").returncode == 0
    polled = _hold(tmp_path, "poll", "30")
    assert polled.returncode == 7 and "oops" in polled.stdout and "ended with exit 7" in polled.stdout
    assert _hold(tmp_path, "status").returncode == 7


def test_poll_before_any_start_is_an_error(tmp_path):
    polled = _hold(tmp_path, "poll", "1")
    assert polled.returncode == 2 and "nothing was started" in polled.stderr


def test_stop_ends_the_command_and_its_children_and_poll_then_says_so(tmp_path):
    pids = tmp_path / "pids"
    started = _hold(tmp_path, "start", f"sleep 300 & echo $! > {pids}; sleep 300")
    assert started.returncode == 0
    for _ in range(100):
        if pids.exists() and pids.read_text().strip():
            break
        subprocess.run(["sleep", "0.05"])
    child = int(pids.read_text())
    os.kill(child, 0)                                    # the command's child runs
    stopped = _hold(tmp_path, "stop")
    assert stopped.returncode == 0 and "stopped pid" in stopped.stdout
    with pytest.raises(ProcessLookupError):             # gone with its session, not left holding the device
        for _ in range(40):
            os.kill(child, 0)
            subprocess.run(["sleep", "0.05"])
    polled = _hold(tmp_path, "poll", "0")
    assert polled.returncode == 143 and "ended with exit 143" in polled.stdout
    assert _hold(tmp_path, "start", "true").returncode == 0           # free for the next command
