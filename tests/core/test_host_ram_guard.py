"""The host-RAM guard of a run (longmedia/comfy/host/ram.py) and the disk read-ahead (execution/disk_prefetch.py),
on stand-ins: a small machine whose pins ComfyUI frees on request, and a recorder of posix_fadvise calls."""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass

import pytest

from longmedia.comfy.host.ram import (
    HostRamGuard,
    block_file_slices,
    host_ram_guard,
    process_read_bytes,
)
from longmedia.execution.disk_prefetch import WILLNEED, DiskPrefetch, FileSlice
from longmedia.report.host_ram import HostRamReport
from longmedia.testing.small_machine import SmallMachine
from longmedia.units import GIB

RNG = random.Random(45)


def test_make_room_frees_pins_until_the_allocation_and_comfyuis_floor_are_available():
    m = SmallMachine(available=int(1.5 * GIB), pinned=20 * GIB)
    guard = HostRamGuard(m.facts(), pin_budget=None, floor=2 * GIB)
    wanted = RNG.randrange(GIB, 3 * GIB)
    event = guard.make_room(wanted, "a decode chunk")
    assert m.asked == [wanted + 2 * GIB - int(1.5 * GIB)]
    assert m.available >= wanted + 2 * GIB
    assert event is not None and event.freed_pin_bytes == m.asked[0] and event.wanted_bytes == wanted
    assert "decode chunk" in event.line()


def test_make_room_frees_nothing_when_ram_is_available():
    m = SmallMachine(available=40 * GIB, pinned=20 * GIB)
    guard = HostRamGuard(m.facts(), pin_budget=None, floor=2 * GIB)
    assert guard.make_room(3 * GIB, "the latent") is None
    assert m.asked == [] and m.pinned == 20 * GIB


def test_start_brings_pins_within_the_plans_budget_and_the_report_says_so():
    m = SmallMachine(available=3 * GIB, pinned=27 * GIB, read=100)
    guard = HostRamGuard(m.facts(), pin_budget=24 * GIB)
    guard.start()
    assert m.pinned == 24 * GIB and m.asked == [3 * GIB]
    m.read += 5 * GIB
    report = guard.finish(model_calls=4)
    assert isinstance(report, HostRamReport)
    assert report.pins_at_start_bytes == 27 * GIB and report.pins_at_end_bytes == 24 * GIB
    assert report.freed_pin_bytes == 3 * GIB
    assert report.disk_read_bytes == 5 * GIB and report.disk_read_per_call_bytes == 5 * GIB // 4
    text = "\n".join(report.lines())
    assert "plan's budget 24.00 GiB" in text and "over 4 model calls (1.25 GiB a call on average" in text
    assert report.to_dict()["freed_pin_bytes"] == 3 * GIB


def test_start_leaves_pins_below_the_budget_alone():
    m = SmallMachine(available=3 * GIB, pinned=10 * GIB)
    HostRamGuard(m.facts(), pin_budget=24 * GIB).start()
    assert m.asked == []


def test_a_short_free_is_noted():
    m = SmallMachine(available=GIB // 2, pinned=GIB)
    guard = HostRamGuard(m.facts(), pin_budget=None, floor=2 * GIB)
    guard.make_room(2 * GIB, "the latent")
    assert any("freed 1.00 of the" in n for n in guard.notes)


def test_the_watch_frees_pins_when_ram_available_falls_below_half_the_floor():
    """--fast-disk: ComfyUI's pin budget follows its pinned-memory limit, not RAM available, and its pins outgrew a
    16 GiB limit on an H100 (the process was killed, docs/lab/2026-12-07-host-ram-limits.md). The watch frees pins at
    a block start once RAM available is below half of ComfyUI's floor, back up to the floor; it leaves ComfyUI's own
    steady state (just under its floor) alone, so no pin is freed to be read again."""
    m = SmallMachine(available=int(1.8 * GIB), pinned=12 * GIB)
    guard = HostRamGuard(m.facts(), pin_budget=None, floor=2 * GIB, watch=True)
    assert guard.hooks_blocks
    guard.on_block(0)
    assert m.asked == []                          # 1.8 GiB: ComfyUI's own steady state
    low = RNG.randrange(GIB // 8, GIB - 1)
    m.available, m.pinned = low, m.pinned - (int(1.8 * GIB) - low)   # ComfyUI pinned past its floor
    guard.on_block(7)
    assert m.asked == [2 * GIB - low] and m.available == 2 * GIB
    m.available -= int(1.5 * GIB)
    guard.on_block(8)
    assert len(m.asked) == 2 and m.available == 2 * GIB
    report = guard.finish(model_calls=1)
    assert [e.what for e in report.events] == ["block 7: RAM available below half of ComfyUI's floor"]
    assert any("at 2 block starts" in n and "--fast-disk" in n for n in report.notes)


def test_without_the_watch_a_block_start_frees_nothing():
    m = SmallMachine(available=GIB // 4, pinned=12 * GIB)
    guard = HostRamGuard(m.facts(), pin_budget=None, floor=2 * GIB)
    assert not guard.hooks_blocks
    guard.on_block(3)
    assert m.asked == []


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, fd: int, offset: int, size: int, advice: int) -> None:
        with self.lock:
            self.calls.append((fd, offset, size, advice))


def _slices(blocks: int) -> dict[int, tuple[FileSlice, ...]]:
    return {b: tuple(FileSlice(7, b * 1000 + k * 100, RNG.randrange(1, 99)) for k in range(3)) for b in range(blocks)}


def test_read_ahead_advises_the_next_blocks_once_per_model_call_and_nothing_past_the_last():
    table, advise = _slices(6), Recorder()
    prefetch = DiskPrefetch(lambda b: table[b], blocks=6, ahead=2, advise=advise)
    for _call in range(2):
        for i in range(6):
            prefetch.on_block(i)
    prefetch.close()
    blocks = [off // 1000 for _, off, _, _ in advise.calls]
    assert sorted(blocks) == sorted(b for b in range(6) for _ in range(2 * 3))  # each block once a call, 3 weights
    assert all(a == WILLNEED for *_, a in advise.calls)
    assert prefetch.advised_bytes == 2 * sum(s.size for b in table for s in table[b])
    assert prefetch.advised_blocks == 12


def test_read_ahead_stays_ahead_of_the_running_block():
    table, advise = _slices(8), Recorder()
    prefetch = DiskPrefetch(lambda b: table[b], blocks=8, ahead=2, advise=advise)
    prefetch.on_block(0)
    prefetch.close()
    assert {off // 1000 for _, off, _, _ in advise.calls} == {0, 1, 2}
    prefetch.on_block(3)  # block 3 runs now: 4 and 5 are read ahead
    prefetch.close()
    assert {off // 1000 for _, off, _, _ in advise.calls} == {0, 1, 2, 4, 5}


def test_read_ahead_is_off_without_fadvise_or_window():
    assert not DiskPrefetch(lambda b: (), blocks=4, ahead=0, advise=Recorder()).active
    off = DiskPrefetch(lambda b: (), blocks=4, ahead=2, advise=None)
    if not hasattr(os, "posix_fadvise"):
        assert not off.active


def test_a_failed_advice_is_recorded_not_raised():
    def broken(fd, offset, size, advice):
        raise OSError(9, "Bad file descriptor")

    prefetch = DiskPrefetch(lambda b: (FileSlice(99, 0, 10),), blocks=3, ahead=1, advise=broken)
    prefetch.on_block(0)
    prefetch.close()
    assert prefetch.failures and "Bad file descriptor" in prefetch.failures[0]
    assert prefetch.advised_bytes == 0


def test_the_real_fadvise_accepts_a_checkpoint_range(tmp_path):
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("posix_fadvise: Linux only")
    path = tmp_path / "w.bin"
    path.write_bytes(os.urandom(1 << 16))
    with open(path, "rb") as f:
        prefetch = DiskPrefetch(lambda b: (FileSlice(f.fileno(), 4096 * b, 4096),), blocks=3, ahead=2)
        prefetch.on_block(0)
        prefetch.close()
    assert prefetch.failures == [] and prefetch.advised_bytes == 3 * 4096


# ------------------------------------------------------------------ which ranges a block reads from the file

class _Slice:
    def __init__(self, ref, offset, size):
        self.file_ref, self.offset, self.size = ref, offset, size


class _Storage:
    def __init__(self, info):
        self._comfy_tensor_file_slice = info


class _Tensor:
    def __init__(self, info):
        self._storage = _Storage(info)

    def untyped_storage(self):
        return self._storage


class _Module:
    def __init__(self, weight=None, bias=None, pinned=False, resident=False):
        self._parameters = {"weight": weight, "bias": bias}
        if pinned:
            self._pins = {"weights": {"pin": object(), "registered": True}}
        if resident:
            self._prefetch = {"resident": True}

    def modules(self):
        return [self]


class _Block:
    def __init__(self, modules):
        self._modules = modules

    def modules(self):
        return list(self._modules)


def test_block_file_slices_skip_pinned_and_resident_weights():
    mk = lambda off: _Tensor(_Slice(5, off, 64))  # noqa: E731
    block = _Block([_Module(mk(0), mk(64)), _Module(mk(128), pinned=True), _Module(mk(192), resident=True),
                    _Module(_Tensor(None))])
    assert block_file_slices(block) == (FileSlice(5, 0, 64), FileSlice(5, 64, 64))


def test_host_ram_guard_reads_ahead_where_asked_and_holds_pins_only_under_dynamic_vram():
    @dataclass(frozen=True)
    class Host:
        pin_budget_bytes: int
        streams_from_disk: bool
        prefetch_blocks: int
        dynamic_vram: bool = True

    @dataclass(frozen=True)
    class Plan:
        host_ram: Host

    facts = SmallMachine(available=GIB, pinned=0).facts()
    blocks = [_Block([]) for _ in range(4)]
    assert host_ram_guard(Plan(Host(GIB, True, 2)), blocks, facts).prefetch is not None
    assert host_ram_guard(Plan(Host(GIB, True, 0)), blocks, facts).prefetch is None   # the plan's default: off
    assert host_ram_guard(Plan(Host(GIB, False, 0)), blocks, facts).prefetch is None
    assert host_ram_guard(Plan(Host(GIB, True, 2)), blocks, facts, read_ahead_blocks=0).prefetch is None
    assert host_ram_guard(Plan(Host(GIB, False, 0)), blocks, facts, read_ahead_blocks=2).prefetch is not None
    one = host_ram_guard(Plan(Host(GIB, False, 0)), blocks, facts, read_ahead_blocks=1).prefetch
    one.on_block(1)   # a depth of 1: block 2 only
    one.close()
    assert one.advised_blocks == 1
    for bad in (-1, True):
        with pytest.raises(ValueError, match="read_ahead_blocks"):
            host_ram_guard(Plan(Host(GIB, True, 0)), blocks, facts, read_ahead_blocks=bad)
    assert host_ram_guard(object(), blocks, facts).pin_budget is None
    # RAM is watched where the plan streams weights from disk under dynamic VRAM, nowhere else
    assert host_ram_guard(Plan(Host(GIB, True, 0)), blocks, facts).watch
    assert not host_ram_guard(Plan(Host(GIB, False, 0)), blocks, facts).watch
    assert not host_ram_guard(Plan(Host(0, True, 0, dynamic_vram=False)), blocks, facts).watch
    assert host_ram_guard(Plan(Host(GIB, True, 0)), blocks, facts).pin_budget == GIB
    # without dynamic VRAM ComfyUI's free_pins reaches no model: no budget to hold (the planner's pinning applies)
    assert host_ram_guard(Plan(Host(0, False, 0, dynamic_vram=False)), blocks, facts).pin_budget is None


def test_process_read_bytes_parses_proc_io(tmp_path):
    path = tmp_path / "io"
    n = RNG.randrange(10**9)
    path.write_text(f"rchar: 5\nwchar: 6\nsyscr: 1\nsyscw: 2\nread_bytes: {n}\nwrite_bytes: 0\n")
    assert process_read_bytes(path) == n
    assert process_read_bytes(tmp_path / "absent") is None


def test_comfyuis_pins_count_as_available_ram_to_the_plan(monkeypatch):
    """A second run in one ComfyUI session finds its weights pinned from the first: those pins are the weights' own
    cache, which the plan's pin budget re-divides, so they count as available (capped at the machine's RAM)."""
    import dataclasses
    import types

    from longmedia.comfy.passes.pass_plan import with_pins_available
    from longmedia.h3.profiles import DeviceProfile

    d = dataclasses.replace(DeviceProfile.card(16, 32), ram_available_bytes=3 * GIB)  # the first run's pins hold it
    pinned = RNG.randrange(GIB, 20 * GIB)
    monkeypatch.setitem(__import__("sys").modules, "comfy.model_management",
                        types.SimpleNamespace(TOTAL_PINNED_MEMORY=pinned))
    assert with_pins_available(d).ram_available_bytes == d.ram_available_bytes + pinned
    monkeypatch.setitem(__import__("sys").modules, "comfy.model_management",
                        types.SimpleNamespace(TOTAL_PINNED_MEMORY=64 * GIB))
    assert with_pins_available(d).ram_available_bytes == d.ram_total_bytes


def test_available_ram_reads_comfyuis_container_aware_reader_where_it_exists(monkeypatch):
    """Upstream ComfyUI (v0.35+) clamps available RAM to a container's limit (comfy.system_memory); 0.33 reads
    psutil. LongMedia reads what the host reads."""
    import sys
    import types

    from longmedia.comfy.host.ram import available_ram

    limit = RNG.randrange(GIB, 8 * GIB)
    monkeypatch.setitem(sys.modules, "comfy.system_memory",
                        types.SimpleNamespace(virtual_memory_available=lambda: limit))
    assert available_ram() == limit
    monkeypatch.delitem(sys.modules, "comfy.system_memory")
    psutil = pytest.importorskip("psutil")
    assert abs(available_ram() - psutil.virtual_memory().available) < GIB


def test_the_plans_words_name_the_line_the_watch_holds():
    """The pinning decision says what is kept during a pass (issue 45: RAM available fell to 1.73-1.91 GiB, below the
    2.2 GiB the plan reserves, in every constrained row): ComfyUI pins to about its floor; the watch frees pins below
    the line the plan names, and not above it."""
    from longmedia.h3.profiles import DeviceProfile, ModelProfile
    from longmedia.planning.host_ram import plan_host_ram
    from longmedia.planning.policy import pinning

    device, model = DeviceProfile.card(16, 32), ModelProfile.preset("h3-int8")
    streamed = 28 * GIB
    plan = plan_host_ram(device, streamed, model.block_weight_bytes, 0, own_alloc_bytes=GIB // 8)
    reason = pinning(model, device, streamed, plan).reason
    line = plan.floor_bytes // 2
    assert f"reserving {plan.headroom_bytes / GIB:.2f} GiB of RAM" in reason
    assert f"frees pins at a block start where less than {line / GIB:.2f} GiB is available" in reason
    for available, frees in ((line, False), (line - RNG.randrange(1, GIB // 4), True)):
        m = SmallMachine(available=available, pinned=12 * GIB)
        HostRamGuard(m.facts(), pin_budget=None, floor=plan.floor_bytes, watch=True).on_block(0)
        assert bool(m.asked) is frees
