"""The card bench under a host RAM limit (issue 45): the balloon's sizing, the /proc parsers, disk reads per model
call, the cells a restarted child skips, the host table's ratio, and bench/disk_read.py's smoke run."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cards import entry as cards
from bench.cards import host_balloon, host_memory, host_table, prompts, rows
from bench.cards.rows import Cell

REPO_ROOT = Path(__file__).resolve().parents[2]
GIB = 2 ** 30
MIB = 2 ** 20

STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t 9000000 kB
VmRSS:\t 5242880 kB
RssAnon:\t 3145728 kB
RssFile:\t 2000000 kB
RssShmem:\t   97152 kB
Threads:\t12
"""
MEMINFO = """MemTotal:       131072000 kB
MemFree:         1000000 kB
MemAvailable:   25165824 kB
Buffers:            1234 kB
HugePages_Total:       0
"""
IO = """rchar: 99999999
wchar: 1234
syscr: 10
syscw: 2
read_bytes: 4294967296
write_bytes: 0
cancelled_write_bytes: 0
"""


def test_the_balloon_takes_the_gap_to_the_limit_in_steps_of_whole_pages():
    target = 24 * GIB
    assert host_balloon.fill_step(100 * GIB, target) == GIB                    # far away: one full step
    gap = 300 * MIB + 123
    assert host_balloon.fill_step(target + gap, target) == 300 * MIB          # near: the gap, whole pages
    assert host_balloon.fill_step(target + 10 * MIB, target) == 0              # within tolerance: done
    assert host_balloon.fill_step(target - GIB, target) == 0                   # below: never gives back


def test_the_balloon_s_steps_reach_the_limit_without_passing_it():
    available, target, taken = 117 * GIB + 5 * MIB, 16 * GIB, 0
    for _ in range(1000):
        n = host_balloon.fill_step(available, target)
        if n == 0:
            break
        available, taken = available - n, taken + n
    assert target <= available <= target + host_balloon.TOLERANCE
    assert taken % host_balloon.PAGE == 0 and taken > 100 * GIB


def test_host_ram_values_take_all_as_no_limit():
    assert cards.parse(["--host-ram-gb", "all", "48", "16"]).host_ram_gb == [None, 48.0, 16.0]
    assert cards.parse([]).host_ram_gb == [] and cards.parse([]).host_ram_limit == "balloon"
    for bad in ("none", "0", "-4"):
        with pytest.raises(argparse.ArgumentTypeError):
            host_balloon.host_ram_value(bad)


def test_proc_status_meminfo_and_io_parse_to_bytes():
    status = host_memory.parse_kib_fields(STATUS)
    assert status["VmRSS"] == 5 * GIB and status["RssAnon"] == 3 * GIB and status["RssShmem"] == 97152 * 1024
    assert "Threads" not in status and "State" not in status
    assert host_memory.mem_available(MEMINFO) == 24 * GIB
    assert host_memory.mem_available("MemTotal: 1 kB\n") is None
    assert "HugePages_Total" not in host_memory.parse_kib_fields(MEMINFO)
    assert host_memory.parse_io(IO)["read_bytes"] == 4 * GIB


def test_disk_reads_per_step_skip_step_one_and_divide_by_the_model_calls():
    read_at = [0, 40 * GIB, 46 * GIB, 52 * GIB, 50 * GIB + 58 * GIB]  # start, then each step's end
    assert host_memory.read_per_step(read_at) == [40 * GIB, 6 * GIB, 6 * GIB, 56 * GIB]
    assert host_memory.steady_read_per_step(read_at) == 6 * GIB         # median of steps 2..4, step 1 excluded
    assert host_memory.steady_read_per_step([0, 40 * GIB]) is None      # one step: no steady step
    assert host_memory.read_per_call(6 * GIB, 2) == 3 * GIB
    assert host_memory.read_per_call(None, 2) is None


def test_the_bench_prompt_s_model_calls_per_step_follow_its_cfg():
    p = prompts.prompt("m.safetensors", 5, 2, 42, "longmedia", 16)
    assert host_memory.calls_per_step(p) == 1  # the bench's CFGGuider runs at cfg 1: ComfyUI skips the uncond
    p["guider"]["inputs"]["cfg"] = 3.5
    assert host_memory.calls_per_step(p) == 2


def test_the_sampler_reads_fake_proc_files(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text(STATUS)
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "self" / "io").write_text(IO)
    pinned = iter([GIB, 3 * GIB, 2 * GIB, 2 * GIB, 2 * GIB])
    memory = host_memory.HostMemory(pinned=lambda: next(pinned, 0), interval_s=3600, proc=str(tmp_path))
    memory.reset()
    (tmp_path / "self" / "io").write_text(IO.replace("4294967296", str(14 * GIB)))
    memory.step()
    (tmp_path / "self" / "io").write_text(IO.replace("4294967296", str(18 * GIB)))
    memory.step()
    fields = memory.fields(calls=2)
    memory.close()
    assert fields["rss_peak_bytes"] == 5 * GIB and fields["rss_anon_peak_bytes"] == 3 * GIB
    assert fields["mem_available_min_bytes"] == 24 * GIB and fields["pinned_peak_bytes"] == 3 * GIB
    assert fields["disk_read_bytes"] == 14 * GIB and fields["disk_read_per_step_bytes"] == 4 * GIB
    assert fields["disk_read_per_call_bytes"] == 2 * GIB and fields["calls_per_step"] == 2


def test_done_cells_key_on_host_ram_and_comfy_args():
    cell = {"card_gib": 16.0, "format": "int8", "seconds": 14.4, "sampler": "longmedia"}
    written = [{**cell, "host_ram_gib": None, "comfy_args": []},
               {**cell, "host_ram_gib": 32.0, "comfy_args": ["--fast-disk"]},
               {**cell, "sampler": "stock"}]  # a row from before the host fields: unlimited, no flags
    done = rows.done_cells
    assert done(written, 16.0) == {Cell("int8", 14.4, "longmedia"), Cell("int8", 14.4, "stock")}
    assert done(written, 16.0, 32.0) == set()
    assert done(written, 16.0, 32.0, ("--fast-disk",)) == {Cell("int8", 14.4, "longmedia")}
    assert done(written, 16.0, None, ["--fast-disk"]) == set()


def test_a_lost_row_carries_its_host_limit_so_the_restart_skips_it():
    a = cards.parse(["--comfy-arg=--fast-disk", "--formats", "int8", "--seconds", "14.4"])
    host = host_balloon.HostLimit(host_ram_gib=24.0, host_ram_limit="balloon", balloon_bytes=GIB)
    cell = Cell("int8", 14.4, "longmedia")
    lost = cards._lost_row(16.0, a, cell, -9, host)
    assert lost["host_ram_gib"] == 24.0 and lost["comfy_args"] == ["--fast-disk"]
    assert lost["result"].startswith("host OOM")
    assert rows.done_cells([lost], 16.0, 24.0, a.comfy_arg) == {cell}
    assert "died (exit -11)" in cards._lost_row(16.0, a, cell, -11, host)["result"]


def test_each_host_limit_gets_its_own_child_with_its_row_fields(monkeypatch, tmp_path):
    import json

    (tmp_path / "comfy").mkdir()
    (tmp_path / "comfy" / "main.py").touch()
    monkeypatch.setenv("LONGMEDIA_COMFYUI_ROOT", str(tmp_path / "comfy"))
    monkeypatch.setattr(cards, "_gpu_and_comfyui", lambda: True)
    started, killed = [], []

    class Balloon:
        returncode = None

        def __init__(self, limit):
            self.limit = limit

        def poll(self):
            return None

        def kill(self):
            killed.append(self.limit)

        def wait(self):
            return 0

    def fake_balloon(limit, cwd):
        return Balloon(limit), host_balloon.HostLimit(limit, "balloon", int((100 - limit) * GIB), int(limit * GIB))

    children = []

    def fake_run(cmd, **kw):
        if "--child" in cmd:
            a = cards.parse(cmd[4:])
            children.append((json.loads(a.host_row), list(killed), kw["preexec_fn"] is not None))
        return subprocess.CompletedProcess(cmd, 0, "ok", "")

    monkeypatch.setattr(cards, "start_balloon", lambda limit, cwd: started.append(limit) or fake_balloon(limit, cwd))
    monkeypatch.setattr(cards.subprocess, "run", fake_run)
    assert cards.main(["--cards", "16", "--host-ram-gb", "all", "24", "--simulate", "reserve", "--out",
                       str(tmp_path), "--models", str(tmp_path / "m")]) == 0
    assert started == [24.0] and killed == [24.0]
    assert [c[0]["host_ram_gib"] for c in children] == [None, 24.0]
    assert children[1][0]["balloon_bytes"] == 76 * GIB and children[1][1] == []  # the balloon lives during its row
    assert all(c[2] for c in children)


def test_the_host_table_divides_by_the_unconstrained_row_of_the_same_job_and_flags():
    base = {"card_gib": 16.0, "sampler": "longmedia", "format": "int8", "seconds": 14.4, "result": "ok"}
    free = {**base, "host_ram_gib": None, "s_per_step": 10.0}
    r24 = {**base, "host_ram_gib": 24.0, "s_per_step": 25.0, "disk_read_per_call_bytes": 3 * GIB}
    fast = {**base, "host_ram_gib": 32.0, "s_per_step": 12.0, "comfy_args": ["--fast-disk"]}
    other_job = {**base, "seconds": 5.0, "host_ram_gib": None, "s_per_step": 1.0}
    rows_ = [other_job, r24, free, fast]
    assert host_table.unconstrained_ratio(r24, rows_) == (2.5, "")
    assert host_table.unconstrained_ratio(fast, rows_) == (pytest.approx(1.2), "vs no flags")
    fast_free = {**fast, "host_ram_gib": None, "s_per_step": 6.0}
    assert host_table.unconstrained_ratio(fast, [*rows_, fast_free]) == (2.0, "")
    assert host_table.unconstrained_ratio({**r24, "s_per_step": None}, rows_) == (None, "")
    assert host_table.unconstrained_ratio(r24, [r24, {**free, "result": "OOM"}]) == (None, "")
    text = host_table.host_table(rows_)
    lines = text.splitlines()
    assert "| 16 | longmedia | - | 24 | - | ok | 25.00 | 2.50 |" in text and "| 3.00 |" in text
    assert lines[2].startswith("| 16 | longmedia | - | all |") and "| 48 |" not in text


def test_disk_read_smoke_exits_0_on_the_cpu():
    out = subprocess.run([sys.executable, "-m", "bench.disk_read", "--smoke"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"bytes_read": 67108864' in out.stdout


def test_a_cgroup_where_none_can_be_made_says_why(tmp_path):
    folder, why = host_balloon.make_cgroup(16, "x", root=tmp_path)
    assert folder is None and "not a cgroup v2 hierarchy" in why
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    assert host_balloon.make_cgroup(16, "x", root=tmp_path)[0] is None
    (tmp_path / "cgroup.controllers").write_text("cpu memory io\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    folder, why = host_balloon.make_cgroup(16, "x", root=tmp_path)
    assert why == "ok" and (folder / "memory.max").read_text() == str(16 * GIB)


def test_measure_copies_the_report_s_host_section_when_there_is_one():
    import json
    import types

    from bench.cards import measure

    class Memory:
        def peak(self):
            return {"process_bytes": 0, "device_used_bytes": 0, "process_source": "test"}

    class Torch:
        class cuda:  # noqa: N801  (mirrors torch.cuda)
            max_memory_allocated = staticmethod(lambda: 0)

    def executor(report: dict):
        return types.SimpleNamespace(success=True, status_messages=[], history_result={"outputs": {"sink": {
            "stats": [{"finite": True}], "report": [json.dumps(report)]}}})

    mm = types.SimpleNamespace(current_loaded_models=[])
    server = types.SimpleNamespace(events=[])
    host = {"mem_available_bytes": 20 * GIB, "anything": [1, 2]}
    out = measure.measure(executor({"plan": {}, "host_ram": host}), server, [], Memory(), Torch, mm, 0.0)
    assert out["result"] == "ok" and out["report_host_ram"] == host
    assert "report_host_ram" not in measure.measure(executor({"plan": {}}), server, [], Memory(), Torch, mm, 0.0)


def test_a_row_killed_under_a_host_limit_is_recorded_and_not_started_again(monkeypatch, tmp_path):
    (tmp_path / "comfy").mkdir()
    (tmp_path / "comfy" / "main.py").touch()
    monkeypatch.setenv("LONGMEDIA_COMFYUI_ROOT", str(tmp_path / "comfy"))
    monkeypatch.setattr(cards, "_gpu_and_comfyui", lambda: True)

    class Balloon:
        returncode = None
        poll = kill = wait = staticmethod(lambda: None)

    starts = []

    def fake_run(cmd, **kw):
        if "--child" not in cmd:
            return subprocess.CompletedProcess(cmd, 0, "ok", "")
        starts.append(cmd)
        return subprocess.CompletedProcess(cmd, -9)  # the kernel's OOM killer, before the row was written

    monkeypatch.setattr(cards, "start_balloon",
                        lambda limit, cwd: (Balloon(), host_balloon.HostLimit(limit, "balloon", GIB, int(limit * GIB))))
    monkeypatch.setattr(cards.subprocess, "run", fake_run)
    assert cards.main(["--cards", "16", "--formats", "int8", "--seconds", "14.4", "--samplers", "longmedia",
                       "--host-ram-gb", "16", "--simulate", "reserve", "--out", str(tmp_path),
                       "--models", str(tmp_path / "m")]) == 0
    written = rows.read_rows(tmp_path / "cards.jsonl")
    assert len(starts) == 1 and len(written) == 1
    assert written[0]["host_ram_gib"] == 16.0 and written[0]["result"].startswith("host OOM")
