"""auto orders exact backends by the speed measured on the device (attention/speed_timing.py), with the reason shown;
the static rank only where no probe ran. The "device" here is a CPU-simulated second profile (sm86, fake timings)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
from attention_fakes import fake_spec

from longmedia.attention.dispatcher import resolve_attention
from longmedia.attention.registry import BackendRegistry
from longmedia.attention.speed_timing import NO_ROOM, SpeedCache, cached_speeds, time_speeds
from longmedia.attention.speeds import MeasuredSpeeds, length_class, timing_rows
from longmedia.comfy.host.attention_speeds import attention_speeds
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest

SM86 = (8, 6)
LABEL = "Fake RTX 3090 sm86, torch test, CUDA none"


def _registry(log):
    # static rank: alpha fastest, then beta, then gamma; a score-materialising one and an approximate one
    return BackendRegistry((fake_spec("alpha", log, rank=0), fake_spec("beta", log, rank=1),
                            fake_spec("gamma", log, rank=2), fake_spec("scores", log, rank=3, score_bytes=8),
                            fake_spec("sol_fake", log, exact=False)))


def _speeds(seconds, seq=40000, head_dim=32, **fields):
    return MeasuredSpeeds(device=LABEL, head_dim=head_dim, dtype="float32", length_class=length_class(seq),
                          rows=timing_rows(length_class(seq)), heads=8, seconds=tuple(seconds), **fields)


def _resolve(registry, speeds, seq=40000, mode="auto"):
    return resolve_attention(mode, seq_len=seq, heads=4, head_dim=32, dtype=torch.float32, device_capability=SM86,
                             registry=registry, available=registry.names, speeds=speeds)


def test_auto_follows_the_measured_ranking_and_says_so():
    reg = _registry([])
    measured = _speeds([("alpha", 0.030), ("beta", 0.021), ("gamma", 0.012)])
    choice = _resolve(reg, measured)
    assert choice.backend == "gamma" and choice.exact
    assert "gamma is the fastest exact backend that fits" in choice.reason
    assert f"ordered by speed measured on {LABEL}" in choice.reason
    assert "gamma 12 ms, beta 21 ms, alpha 30 ms" in choice.reason
    # another measurement, another choice
    tight = dataclasses.replace(measured, seconds=(("alpha", 0.030), ("beta", 0.011), ("gamma", 0.012)))
    assert _resolve(reg, tight).backend == "beta"
    # untimed backends follow the timed ones, in the static rank
    partial = _speeds([("gamma", 0.05)])
    assert _resolve(reg, partial).backend == "gamma"


def test_static_rank_where_no_probe_ran_and_the_reason_names_why():
    reg = _registry([])
    assert "no speed timing was handed in" in _resolve(reg, None).reason and _resolve(reg, None).backend == "alpha"
    refused = MeasuredSpeeds.none("no CUDA device: only CUDA kernels are timed", head_dim=32, dtype="float32",
                                  seq_len=40000)
    choice = _resolve(reg, refused)
    assert choice.backend == "alpha" and "static rank" in choice.reason and "no CUDA device" in choice.reason
    other_class = _speeds([("gamma", 0.001)], seq=1000)  # timed for short calls, this job is medium
    choice = _resolve(reg, other_class)
    assert choice.backend == "alpha" and "not this call's" in choice.reason
    other_dim = _speeds([("gamma", 0.001)], head_dim=64)
    assert _resolve(reg, other_dim).backend == "alpha"


def test_sol_modes_name_the_measured_exact_backend_for_their_exact_phases():
    reg = _registry([])
    choice = _resolve(reg, _speeds([("alpha", 0.03), ("gamma", 0.01)]), mode="sol")
    assert choice.backend == "sol_fake" and choice.exact_backend == "gamma"
    assert "exact phases run gamma" in choice.reason and "ordered by speed measured" in choice.reason


class _Clock:
    """Fake device timings: seconds per backend, and which backends were timed."""

    def __init__(self, seconds):
        self.seconds, self.timed = dict(seconds), []

    def __call__(self, name, call):
        out = call()
        assert out.shape[-1] == 8 * 32 and torch.isfinite(out).all()  # the call really ran
        self.timed.append(name)
        return self.seconds[name]


def _probe(reg, cache, clock, seq=40000, **kw):
    return time_speeds(reg, cache, device="cpu", head_dim=32, dtype=torch.float32, seq_len=seq, timer=clock,
                        label=LABEL, capability=SM86, available=reg.names, **kw)


def test_probe_times_the_exact_candidates_and_caches_them_per_device(tmp_path, monkeypatch):
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 192)  # small CPU calls
    log = []
    reg, cache = _registry(log), SpeedCache(tmp_path)
    clock = _Clock({"alpha": 0.03, "beta": 0.02, "gamma": 0.01})
    got = _probe(reg, cache, clock)
    assert sorted(clock.timed) == ["alpha", "beta", "gamma"]  # not the score-materialising one, not Sol
    assert got.order == ("gamma", "beta", "alpha") and not got.cached
    assert dict(got.skipped)["scores"] == "materialises the scores"
    stored = json.loads(cache.path.read_text())
    assert stored["entries"][cache.key(LABEL, 32, "float32", "medium")]["seconds"]["gamma"] == 0.01
    # a second run reads the cache and times nothing
    again = _probe(reg, cache, _Clock({}))
    assert again.cached and again.order == got.order
    # another device (or torch) is another entry: probed afresh
    other = time_speeds(reg, cache, device="cpu", head_dim=32, dtype=torch.float32, seq_len=40000,
                         timer=_Clock({"alpha": 0.01, "beta": 0.02, "gamma": 0.03}), label="Other GPU",
                         capability=SM86, available=reg.names)
    assert other.order == ("alpha", "beta", "gamma") and not other.cached
    # a backend installed later is timed alone and merged in
    newer = reg.with_backends(fake_spec("delta", log, rank=5))
    clock = _Clock({"delta": 0.005})
    merged = _probe(newer, cache, clock)
    assert clock.timed == ["delta"] and merged.order == ("delta", "gamma", "beta", "alpha")


def test_the_probe_reports_its_own_time_and_a_cached_read_reports_none(tmp_path, monkeypatch):
    """The probe runs before the first model call, so only a clock that starts at the node sees it (on the H100 the
    first LongMedia row of each machine took 12-20 s longer than its report's first step, and later rows did not).
    Its seconds come back with the timings and in the plan's reason; a read from the disk cache carries none."""
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 192)
    reg, cache = _registry([]), SpeedCache(tmp_path)
    rng = random.Random(133)
    start = rng.uniform(100.0, 200.0)
    took = rng.uniform(5.0, 20.0)
    ticks = iter([start, start + took])
    got = _probe(reg, cache, _Clock({"alpha": 0.03, "beta": 0.02, "gamma": 0.01}), wall=lambda: next(ticks))
    assert abs(got.probe_s - took) < 1e-9 and not got.cached
    assert f"timed now, in {took:.1f} s before the first model call" in got.summary()
    again = _probe(reg, cache, _Clock({}), wall=lambda: pytest.fail("a cached read must not time a probe"))
    assert again.cached and again.probe_s == 0.0
    assert again.summary().endswith("read from the on-disk cache") and "timed now" not in again.summary()
    with pytest.raises(ValueError, match="probe_s"):
        dataclasses.replace(got, probe_s=-1.0)


def test_probe_skips_what_cannot_run_and_retries_what_had_no_room(tmp_path, monkeypatch):
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 192)
    log = []

    def broken(ctx):
        def fn(q, k, v, *, q_offset=0):
            raise RuntimeError("kernel refused these strides")
        return fn
    reg = _registry(log).with_backends(dataclasses.replace(fake_spec("broken", log, rank=1), factory=broken))
    cache = SpeedCache(tmp_path)
    got = _probe(reg, cache, _Clock({"alpha": 0.03, "beta": 0.02, "gamma": 0.01}), free_bytes=1)
    assert got.seconds == () and all(dict(got.skipped)[n].startswith(NO_ROOM) for n in ("alpha", "gamma"))
    assert "timed none" in _resolve(reg, got).reason and _resolve(reg, got).backend == "alpha"
    clock = _Clock({"alpha": 0.03, "beta": 0.02, "gamma": 0.01})
    got = _probe(reg, cache, clock)  # nothing cached for want of room: timed now
    assert sorted(clock.timed) == ["alpha", "beta", "gamma"]
    assert "RuntimeError: kernel refused these strides" in dict(got.skipped)["broken"]
    clock = _Clock({})
    assert _probe(reg, cache, clock).skipped and clock.timed == []  # a real failure is remembered


def test_unreadable_cache_is_probed_again(tmp_path, monkeypatch):
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 192)
    cache = SpeedCache(tmp_path)
    cache.path.write_text("{not json")
    clock = _Clock({"alpha": 0.03, "beta": 0.02, "gamma": 0.01})
    assert _probe(_registry([]), cache, clock).order == ("gamma", "beta", "alpha") and len(clock.timed) == 3


def test_comfy_side_refuses_on_cpu_or_when_switched_off(tmp_path):
    cache = SpeedCache(tmp_path)
    off = attention_speeds("cuda:0", attention_mode="auto", head_dim=128, seq_len=109190, cache=cache,
                           environ={"LONGMEDIA_SPEED_PROBE": "off"})
    assert off.refused == "LONGMEDIA_SPEED_PROBE=off" and off.length_class == "long"
    cpu = attention_speeds("cpu", attention_mode="sol", head_dim=128, seq_len=109190, cache=cache, environ={})
    assert "no CUDA device" in cpu.refused and not cache.path.exists()
    assert attention_speeds("cpu", attention_mode="existing", head_dim=128, seq_len=10, cache=cache) is None


def test_the_plan_reasons_carry_the_measured_order():
    g, model = build_geometry(1344, 768, seconds=5), ModelProfile.preset("h3-int8")
    card = DeviceProfile.card(24, 64, compute_capability=SM86)
    static = plan(model, card, g, PlanRequest())
    assert static.attention.source == "dispatcher"
    first = static.attention.backend
    other = next(n for n in ("qstream_triton", "sdpa_efficient", "sdpa") if n != first)
    measured = MeasuredSpeeds(device=LABEL, head_dim=128, dtype="bfloat16", length_class=length_class(g.seq_len),
                              rows=65536, heads=8, seconds=((first, 0.02), (other, 0.01)))
    p = plan(model, card, g, PlanRequest(attention_speeds=measured))
    assert p.attention.backend == other
    assert any(f"ordered by speed measured on {LABEL}" in r for r in p.attention.reasons)
    assert any("no speed timing was handed in" in r for r in static.attention.reasons)
    json.loads(p.to_json())


def test_measured_speeds_refuse_nonsense():
    with pytest.raises(ValueError, match="length_class"):
        MeasuredSpeeds(device="x", head_dim=1, dtype="float32", length_class="huge")
    with pytest.raises(ValueError, match="> 0"):
        _speeds([("alpha", 0.0)])


class _AnyDimClock(_Clock):
    """_Clock for any head_dim: runs the call, returns the name's seconds."""

    def __call__(self, name, call):
        assert torch.isfinite(call()).all()
        self.timed.append(name)
        return self.seconds[name]


def _probe_dim(reg, cache, clock, head_dim):
    return time_speeds(reg, cache, device="cpu", head_dim=head_dim, dtype=torch.float32, seq_len=40000, timer=clock,
                        label=LABEL, capability=SM86, available=reg.names)


def test_the_cache_keeps_each_head_dim_and_each_code_version_apart(tmp_path, monkeypatch):
    """Timings of one head_dim never serve another, and timings of other kernel code never serve this code: each
    is timed afresh (a key without head_dim, or without the code's fingerprint, fails here)."""
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 192)
    reg = _registry([])
    old_code = SpeedCache(tmp_path, fingerprint="kernels-v1")
    first = _probe_dim(reg, old_code, _AnyDimClock({"alpha": 0.03, "beta": 0.02, "gamma": 0.01}), 32)
    other_dim = _probe_dim(reg, old_code, _AnyDimClock({"alpha": 0.01, "beta": 0.02, "gamma": 0.03}), 64)
    assert not other_dim.cached and other_dim.order == ("alpha", "beta", "gamma") != first.order
    assert _probe_dim(reg, old_code, _AnyDimClock({}), 32).order == first.order  # each head_dim read back as timed
    assert _probe_dim(reg, old_code, _AnyDimClock({}), 64).order == other_dim.order
    new_code = SpeedCache(tmp_path, fingerprint="kernels-v2")
    clock = _AnyDimClock({"alpha": 0.02, "beta": 0.01, "gamma": 0.03})
    upgraded = _probe_dim(reg, new_code, clock, 32)
    assert not upgraded.cached and sorted(clock.timed) == ["alpha", "beta", "gamma"]
    assert upgraded.order == ("beta", "alpha", "gamma")


def test_a_key_holds_the_head_dim_and_the_code_fingerprint(tmp_path):
    """head_dim 64's key is not 128's, another code fingerprint's key is not this one's, and an entry written under
    another fingerprint (or for another head_dim) is never served: not read back, not handed to a forecast."""
    rng = random.Random()
    seconds = (("alpha", rng.uniform(0.01, 0.05)), ("beta", rng.uniform(0.01, 0.05)))
    old_code, new_code = SpeedCache(tmp_path, fingerprint="kernels-v1"), SpeedCache(tmp_path, fingerprint="kernels-v2")
    cls = length_class(40000)
    assert old_code.key(LABEL, 64, "float32", cls) != old_code.key(LABEL, 128, "float32", cls)
    assert old_code.key(LABEL, 64, "float32", cls) != new_code.key(LABEL, 64, "float32", cls)
    written = _speeds(seconds, head_dim=64)
    old_code.write(written)
    assert old_code.read(LABEL, 64, "float32", cls).seconds == written.seconds
    assert old_code.read(LABEL, 128, "float32", cls) is None
    assert new_code.read(LABEL, 64, "float32", cls) is None
    reg = _registry([])

    def known(cache, head_dim):
        return cached_speeds(reg, cache, device="cpu", head_dim=head_dim, dtype=torch.float32, seq_len=40000,
                             label=LABEL, capability=SM86, available=("alpha", "beta"))
    assert known(old_code, 64).cached and known(old_code, 64).seconds == written.seconds
    assert known(old_code, 128) is None and known(new_code, 64) is None


def test_the_cached_read_times_nothing_and_serves_only_a_whole_entry(tmp_path, monkeypatch):
    """`cached_speeds` (a forecast's read) is what `time_speeds` would return, without a probe: None where the cache
    lacks a candidate (a probe would time it), the entry where it holds all; on CPU the probe's refusal."""
    monkeypatch.setattr("longmedia.attention.speed_timing.timing_rows", lambda cls: 192)
    monkeypatch.setattr("longmedia.attention.speed_timing.measure_speeds",
                        lambda *a, **kw: pytest.fail("a cached read must not time anything"))
    reg, cache = _registry([]), SpeedCache(tmp_path)

    def known(available):
        return cached_speeds(reg, cache, device="cpu", head_dim=32, dtype=torch.float32, seq_len=40000, label=LABEL,
                             capability=SM86, available=available)
    assert known(reg.names) is None and not cache.path.exists()
    rng = random.Random()
    cache.write(_speeds([("alpha", rng.uniform(0.01, 0.05)), ("beta", rng.uniform(0.01, 0.05))]))
    got = known(("alpha", "beta"))
    assert got.cached and got.probe_s == 0.0 and set(got.order) == {"alpha", "beta"}
    assert known(("alpha", "beta", "gamma")) is None   # gamma untimed: a probe would time it
    refused = cached_speeds(reg, cache, device="cpu", head_dim=32, dtype=torch.float32, seq_len=40000)
    assert "no CUDA device" in refused.refused
    off = attention_speeds("cuda:0", attention_mode="auto", head_dim=128, seq_len=1000, cache=cache, measure=False,
                           environ={"LONGMEDIA_SPEED_PROBE": "off"})
    assert off.refused == "LONGMEDIA_SPEED_PROBE=off"


def test_the_code_fingerprint_reads_the_kernels_sources(tmp_path, monkeypatch):
    """The default fingerprint is a digest of our kernels' and backends' sources: it changes with them."""
    from longmedia.attention import speed_timing

    here = speed_timing.code_fingerprint()
    assert here == SpeedCache(tmp_path).fingerprint and len(here) == 16
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real_read(self) + (b"#" if self.name == "qstream_attention.py"
                                                                             else b""))
    assert speed_timing.code_fingerprint() != here
