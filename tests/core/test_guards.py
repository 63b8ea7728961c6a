"""Inter-block, emergency, late-block and step-boundary guards driven by scripted free-memory readings."""

from __future__ import annotations

import random

import pytest

from longmedia.errors import LongMediaInputError
from longmedia.execution.guards import GuardEvent, Guards, GuardSettings, guards_for_device
from longmedia.units import MIB as MB


class Script:
    """A memory reader that replays readings (MB) and a cleanup that counts calls and adds `recover_mb`."""

    def __init__(self, readings_mb, recover_mb: float = 0.0):
        self.readings = [int(r * MB) for r in readings_mb]
        self.recover = int(recover_mb * MB)
        self.reads = 0
        self.cleanups = 0
        self.current = None

    def read(self) -> int:
        if self.current is None:
            self.current = self.readings[self.reads]
        self.reads += 1
        value, self.current = self.current, None
        return value

    def cleanup(self) -> None:
        self.cleanups += 1
        # the post-cleanup reading is the pre-cleanup one plus what the cleanup recovered
        self.current = self.readings[self.reads - 1] + self.recover
        self.readings.insert(self.reads, self.current)


def run_blocks(settings: GuardSettings, readings_mb, recover_mb: float = 0.0, start: int = 0):
    script = Script(readings_mb, recover_mb)
    guards = Guards(settings, script.read, script.cleanup)
    fired = [guards.on_block_end(start + i) for i in range(len(readings_mb))]
    return guards, script, fired


def fired_blocks(fired) -> list[int]:
    return [e.block for e in fired if e is not None]


def test_threshold_fires_only_below_and_records_the_event():
    s = GuardSettings(inter_block_vram_guard_mb=2000)
    guards, script, fired = run_blocks(s, [3000, 2000, 1999.5, 4000], recover_mb=3000)
    assert fired_blocks(fired) == [2]
    event = fired[2]
    assert event == GuardEvent("inter_block", 2, 0, 1999.5, 2000, 4999.5)
    assert event.recovered_mb == pytest.approx(3000)
    assert script.cleanups == 1
    assert guards.report().count("inter_block") == 1
    assert "inter_block at step 0 block 2" in guards.report().lines[0]


def test_cooldown_skips_exactly_that_many_blocks():
    s = GuardSettings(inter_block_vram_guard_mb=2000, inter_block_guard_cooldown_blocks=3)
    # always below and the cleanup recovers enough to re-arm: only the cooldown spaces the firings
    _, script, fired = run_blocks(s, [1000] * 10, recover_mb=5000)
    assert fired_blocks(fired) == [0, 4, 8]
    assert script.cleanups == 3


def test_cooldown_counts_blocks_across_steps():
    s = GuardSettings(inter_block_vram_guard_mb=2000, inter_block_guard_cooldown_blocks=2)
    script = Script([1000] * 8, recover_mb=5000)
    guards = Guards(s, script.read, script.cleanup)
    events = []
    for step in range(2):
        for block in range(4):
            events.append(guards.on_block_end(block))
        guards.on_step_end(step)
    got = [(e.step, e.block) for e in events if e is not None]
    assert got == [(0, 0), (0, 3), (1, 2)]


def test_hysteresis_waits_for_the_rearm_level_when_a_cleanup_does_not_help():
    s = GuardSettings(inter_block_vram_guard_mb=2000, inter_block_guard_hysteresis_mb=500)
    # the cleanup recovers nothing: after firing at block 0 the guard stays disarmed while free
    # wanders between the threshold and threshold + hysteresis, and re-arms at 2500
    guards, _, fired = run_blocks(s, [1500, 1500, 2100, 2499, 1000, 2500, 1900], recover_mb=0)
    assert fired_blocks(fired) == [0, 6]
    assert guards.armed is False


def test_hysteresis_rearms_at_once_when_the_cleanup_clears_the_rearm_level():
    s = GuardSettings(inter_block_vram_guard_mb=2000, inter_block_guard_hysteresis_mb=500)
    guards, _, fired = run_blocks(s, [1500, 1500, 1500], recover_mb=1000)
    assert fired_blocks(fired) == [0, 1, 2]
    assert guards.armed is True


def test_emergency_overrides_cooldown_and_arming_with_its_own_cooldown():
    s = GuardSettings(inter_block_vram_guard_mb=2000, inter_block_guard_cooldown_blocks=5,
                      inter_block_guard_emergency_mb=800, inter_block_guard_emergency_cooldown_blocks=1)
    guards, _, fired = run_blocks(s, [1500, 700, 700, 700, 1500, 700], recover_mb=0)
    kinds = [(e.kind, e.block) for e in fired if e is not None]
    # block 0 normal; blocks 1 and 3 emergency despite the normal cooldown (1-block emergency cooldown skips 2)
    assert kinds == [("inter_block", 0), ("emergency", 1), ("emergency", 3), ("emergency", 5)]
    assert fired[1].threshold_mb == 800


def test_emergency_with_zero_cooldown_fires_every_block_below_it():
    s = GuardSettings(inter_block_guard_emergency_mb=800)
    _, script, fired = run_blocks(s, [700, 900, 700, 700])
    assert fired_blocks(fired) == [0, 2, 3]
    assert {e.kind for e in fired if e is not None} == {"emergency"}


def test_late_block_guard_starts_at_its_index():
    s = GuardSettings(late_block_guard_start=45, late_block_guard_target_mb=3000)
    _, _, fired = run_blocks(s, [1000] * 10, recover_mb=0, start=40)
    assert fired_blocks(fired) == [45, 46, 47, 48, 49]
    assert {e.kind for e in fired if e is not None} == {"late_block"}
    assert all(e.threshold_mb == 3000 for e in fired if e is not None)


def test_one_cleanup_per_block_with_emergency_first():
    s = GuardSettings(inter_block_vram_guard_mb=2000, inter_block_guard_emergency_mb=500,
                      late_block_guard_start=0, late_block_guard_target_mb=3000)
    _, script, fired = run_blocks(s, [400, 1000, 2500, 3500], recover_mb=0)
    assert [e.kind if e else None for e in fired] == ["emergency", "late_block", "late_block", None]
    assert script.cleanups == 3


def test_step_boundary_cleans_below_threshold_and_tracks_steps():
    s = GuardSettings(step_boundary_cleanup_mb=1000)
    script = Script([1200, 999, 5000])
    guards = Guards(s, script.read, script.cleanup)
    events = [guards.on_step_end(step) for step in range(3)]
    assert [e.step if e else None for e in events] == [None, 1, None]
    assert events[1].kind == "step_boundary" and events[1].block is None and events[1].threshold_mb == 1000
    assert guards.report().steps_seen == 3
    assert script.cleanups == 1


def test_disabled_at_zero_never_reads_or_cleans():
    calls = []
    guards = Guards(GuardSettings(), lambda: calls.append("read") or 0, lambda: calls.append("clean"))
    for step in range(3):
        for block in range(50):
            assert guards.on_block_end(block) is None
        assert guards.on_step_end(step) is None
    assert calls == []
    assert guards.report().blocks_seen == 150 and not guards.report().events
    assert not GuardSettings().any_on


def test_random_readings_respect_every_rule():
    rng = random.Random(1234)
    s = GuardSettings(inter_block_vram_guard_mb=3000, inter_block_guard_cooldown_blocks=2,
                      inter_block_guard_hysteresis_mb=400, inter_block_guard_emergency_mb=1000,
                      inter_block_guard_emergency_cooldown_blocks=1)
    readings = [rng.uniform(200, 6000) for _ in range(400)]
    _, script, fired = run_blocks(s, readings, recover_mb=rng.uniform(0, 800))
    last_cleanup = last_emergency = -100
    for i, (free, event) in enumerate(zip(readings, fired)):
        if event is None:
            continue
        assert event.free_mb == pytest.approx(free, abs=1e-3)
        assert event.free_mb < event.threshold_mb
        if event.kind == "emergency":
            assert i - last_emergency > 1
            last_emergency = i
        else:
            assert event.kind == "inter_block" and free >= 1000
            assert i - last_cleanup > 2
        last_cleanup = i
    assert script.cleanups == sum(e is not None for e in fired) > 10


def test_the_plan_carries_the_guards_the_executor_runs_and_settings_are_validated():
    from longmedia.h3.profiles import DeviceProfile, ModelProfile
    from longmedia.job.geometry import build_geometry
    from longmedia.planning.attention_path import default_attention_path
    from longmedia.planning.planner import plan
    from longmedia.planning.types import PlanRequest

    request = PlanRequest(memory_mode="low_vram", inter_block_vram_guard_mb=1500, late_block_guard_start=44,
                          step_boundary_cleanup_mb=900)
    p = plan(ModelProfile.preset("h3-int8"), DeviceProfile.card(16), build_geometry(1344, 768, seconds=10), request,
             attention_resolver=default_attention_path)
    s = p.guards
    assert isinstance(s, GuardSettings)
    assert (s.inter_block_vram_guard_mb, s.late_block_guard_start, s.step_boundary_cleanup_mb) == (1500, 44, 900)
    assert s.inter_block_guard_emergency_cooldown_blocks == 0 and s.any_on
    with pytest.raises(LongMediaInputError, match="inter_block_vram_guard_mb=-1"):
        GuardSettings(inter_block_vram_guard_mb=-1)
    with pytest.raises(LongMediaInputError, match="late_block_guard_start"):
        GuardSettings(late_block_guard_start=5000)


def test_guards_on_cpu_never_fire():
    guards = guards_for_device(GuardSettings(inter_block_vram_guard_mb=10 ** 6), "cpu")
    assert guards.on_block_end(0) is None and guards.on_step_end(0) is None


def test_late_block_and_emergency_guards_release_resident_weights_when_the_cache_is_not_enough():
    """A guard's clean-up empties torch's cache; when that leaves less free than the guard's level, the
    emergency and late-block guards ask the host to release resident weights (comfy-aimdo VBAR pages) for the
    rest, and the event says how much came back. The inter-block guard only empties the cache."""
    free = {"now": 1000 * MB}
    asked = []

    def release(wanted):
        asked.append(wanted)
        free["now"] += wanted
        return wanted

    s = GuardSettings(late_block_guard_start=0, late_block_guard_target_mb=3000)
    guards = Guards(s, lambda: free["now"], lambda: free.__setitem__("now", free["now"] + 500 * MB), release)
    event = guards.on_block_end(5)
    assert event.kind == "late_block" and asked == [1500 * MB]
    assert event.released_mb == pytest.approx(1500) and event.free_after_mb == pytest.approx(3000)
    assert "1500 MB of resident weights released" in guards.report().lines[0]
    inter = Guards(GuardSettings(inter_block_vram_guard_mb=3000), lambda: 1000 * MB, lambda: None, release)
    assert inter.on_block_end(0).released_mb == 0 and len(asked) == 1


def test_a_failing_release_is_recorded_on_the_event_not_raised():
    """comfy-aimdo 0.6+ raises from ModelVBAR.free_memory; the host's release turns it into ReleaseFailed, which
    the guard records on its event (and in its report line) and goes on."""
    import random

    from longmedia.execution.guards import ReleaseFailed

    rng = random.Random(21)
    free = {"now": rng.randrange(200, 900) * MB}

    def release(wanted):
        raise ReleaseFailed(f"comfy_aimdo ModelVBAR.free_memory({wanted}) raised RuntimeError: pinned")

    s = GuardSettings(inter_block_guard_emergency_mb=4000)
    guards = Guards(s, lambda: free["now"], lambda: None, release)
    event = guards.on_block_end(0)
    assert event is not None and event.released_mb == 0 and "pinned" in event.release_failure
    assert "releasing resident weights failed: comfy_aimdo ModelVBAR.free_memory" in guards.report().lines[0]
    assert guards.on_block_end(1).release_failure is not None  # still guarding after the failure


def test_comfy_vbar_release_turns_aimdo_runtime_errors_into_release_failed(monkeypatch):
    import sys
    from types import SimpleNamespace

    from longmedia.comfy.host.memory import vbar_release
    from longmedia.execution.guards import ReleaseFailed

    monkeypatch.setitem(sys.modules, "comfy.memory_management", SimpleNamespace(aimdo_enabled=True))

    class RaisingVBAR:
        def free_memory(self, size):
            raise RuntimeError(f"vbar_free_memory({size}): -16")

    patcher = SimpleNamespace(model=SimpleNamespace(dynamic_vbars={"cuda:0": RaisingVBAR()}), load_device="cuda:0")
    release = vbar_release(patcher)
    with pytest.raises(ReleaseFailed, match=r"free_memory\(4096\).*-16"):
        release(4096)
