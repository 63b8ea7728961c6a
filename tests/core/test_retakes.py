"""Retakes without ComfyUI: the hash chain, the bounded cache (RAM, then the spill folder), identity pins, and the
property that a run resamples exactly the first segment no earlier run shared a prefix with, and all after it."""

from __future__ import annotations

import gc
import hashlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from longmedia.errors import LongMediaInputError
from longmedia.segments.fingerprint import ByIdentity, Fingerprint, Uncacheable
from longmedia.segments.retakes import RetakeCache, RetakeChain, chain_key
from longmedia.units import MIB

SEGMENTS = 5


def fake_pass(context: torch.Tensor | None, seed: int, prompt: int) -> torch.Tensor:
    """A deterministic 'sampler': fresh random output from the segment's inputs and its context."""
    ctx = 0 if context is None else int(hashlib.sha256(context.numpy().tobytes()).hexdigest()[:8], 16)
    g = torch.Generator().manual_seed((seed * 1_000_003 + prompt * 7919 + ctx) % (2 ** 63))
    return torch.randn(3, 4, generator=g)


def run(inputs, cache, job="job"):
    """One job of len(inputs) segments through a RetakeChain as comfy/passes/segmented.py walks it."""
    chain = RetakeChain(cache, job)
    outs = []
    for i, (seed, prompt) in enumerate(inputs):
        context = outs[-1][-1:] if outs else None
        digest = Fingerprint().digest({"seed": seed, "prompt": prompt, "context": context})
        key = chain.key(digest)
        hit = chain.lookup(i, key)
        if hit is not None:
            out = hit.tensors[0]
        else:
            out = fake_pass(context, seed, prompt)
            chain.store(key, (out,), {"index": i})
        outs.append(out)
    return outs, chain


segment_inputs = st.tuples(st.integers(0, 3), st.integers(0, 3))


@given(first=st.lists(segment_inputs, min_size=SEGMENTS, max_size=SEGMENTS),
       edits=st.lists(st.lists(st.tuples(st.integers(0, SEGMENTS - 1), segment_inputs), max_size=3), max_size=4))
@settings(max_examples=60, deadline=None)
def test_a_run_resamples_the_first_segment_no_earlier_run_shares_and_all_after(first, edits):
    cache = RetakeCache(64 * MIB, 0)
    history = [list(first)]
    outs, chain = run(first, cache)
    assert chain.sampled == list(range(SEGMENTS)) and chain.reused == []
    current = list(first)
    for edit in edits:
        for index, value in edit:
            current[index] = value
        shared = max(next((i for i in range(SEGMENTS) if old[i] != current[i]), SEGMENTS) for old in history)
        outs, chain = run(current, cache)
        assert chain.sampled == list(range(shared, SEGMENTS)), (history, current)
        assert chain.reused == list(range(shared))
        fresh, _ = run(current, None)     # no cache: every segment sampled
        assert all(torch.equal(a, b) for a, b in zip(outs, fresh))
        history.append(list(current))


def test_changing_one_segment_resamples_it_and_every_later_one():
    cache = RetakeCache(64 * MIB, 0)
    inputs = [(1, 0), (2, 0), (3, 1), (4, 2)]
    run(inputs, cache)
    inputs[2] = (99, 1)
    outs, chain = run(inputs, cache)
    assert chain.reused == [0, 1] and chain.sampled == [2, 3]
    report = chain.report()
    assert report.reused == (0, 1) and report.sampled == (2, 3) and report.entries == 6
    assert "reused segments 0, 1; sampled 2, 3" in report.line()
    _, other_job = run(inputs, cache, job="another model")    # a job digest change invalidates every segment
    assert other_job.reused == [] and other_job.sampled == [0, 1, 2, 3]


def test_chain_keys_depend_on_every_earlier_segment():
    a = chain_key(chain_key(None, "j", "s0"), "j", "s1")
    assert a != chain_key(chain_key(None, "j", "s0*"), "j", "s1")
    assert a != chain_key(chain_key(None, "j*", "s0"), "j*", "s1")
    assert a == chain_key(chain_key(None, "j", "s0"), "j", "s1")


def test_the_cache_spills_past_its_ram_bound_and_drops_past_both(tmp_path):
    g = torch.Generator().manual_seed(3)
    tensors = [torch.randn(MIB // 4, generator=g) for _ in range(6)]    # 1 MiB each (float32)
    cache = RetakeCache(2 * MIB, 3 * MIB, tmp_path)
    for i, t in enumerate(tensors):
        cache.put(f"k{i}", (t,), i)
        assert cache.ram_bytes <= 2 * MIB and cache.disk_bytes <= 3 * MIB
    assert len(cache) == 5 and cache.get("k0") is None                  # the oldest dropped
    report = cache.report()
    assert report.ram_bytes == 2 * MIB and report.disk_bytes == 3 * MIB and report.evicted == 1
    assert report.spilled == 4 and len(list(cache.spill_dir.glob("*.pt"))) == 3   # k0 spilled, then dropped
    for i in range(1, 6):                                                # spilled ones come back bit for bit
        hit = cache.get(f"k{i}")
        assert hit.record == i and torch.equal(hit.tensors[0], tensors[i])
    hit.tensors[0].add_(1.0)                                             # a served copy, never the stored one
    assert torch.equal(cache.get("k5").tensors[0], tensors[5])
    spill = cache.spill_dir
    cache.clear()
    assert len(cache) == 0 and not spill.exists()


def test_a_missing_or_damaged_spill_file_samples_that_segment_again(tmp_path):
    """Issue 49: spill files deleted from ComfyUI's temp folder (raw FileNotFoundError) or cut short (raw OSError)
    failed every later retake. Now that segment is a miss: dropped, counted, said in the report."""
    g = torch.Generator().manual_seed(4)
    tensors = [torch.randn(MIB // 4, generator=g) for _ in range(4)]
    cache = RetakeCache(1 * MIB, 8 * MIB, tmp_path)
    for i, t in enumerate(tensors):
        cache.put(f"k{i}", (t,), i)
    files = sorted(cache.spill_dir.glob("*.pt"))
    assert len(files) == 3
    (cache.spill_dir / "k0.pt").unlink()
    damaged = cache.spill_dir / "k1.pt"
    damaged.write_bytes(damaged.read_bytes()[:100])
    assert cache.get("k0") is None and cache.get("k1") is None
    assert torch.equal(cache.get("k2").tensors[0], tensors[2]) and len(cache) == 2
    report = cache.report()
    assert report.unreadable == 2 and "2 spilled segment file(s) were missing or damaged" in report.notes()[0]


def test_a_full_temp_folder_drops_what_it_cannot_spill_instead_of_failing(tmp_path, monkeypatch):
    """Issue 49: a full temp folder failed the prompt after sampling with torch's raw RuntimeError and left a
    partial file. Now the spill stops, no partial file stays, the entries past the RAM bound are dropped, and the
    report says why."""
    import pathlib

    import longmedia.segments.retakes as retakes

    def full(obj, path):
        pathlib.Path(path).write_bytes(b"PK partial")
        raise RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file data/0: "
                           "file write failed")

    monkeypatch.setattr(retakes.torch, "save", full)
    cache = RetakeCache(1 * MIB, 8 * MIB, tmp_path)
    for i in range(3):
        cache.put(f"k{i}", (torch.randn(MIB // 4),), i)
    assert len(cache) == 1 and cache.get("k2") is not None and cache.disk_bytes == 0
    assert list(cache.spill_dir.glob("*")) == []
    report = cache.report()
    assert "PytorchStreamWriter failed" in report.spill_error and "could not spill" in report.notes()[0]


def test_without_a_spill_folder_the_ram_bound_drops_the_oldest():
    cache = RetakeCache(1 * MIB, 8 * MIB, None)
    for i in range(3):
        cache.put(f"k{i}", (torch.randn(MIB // 4),), i)
    assert len(cache) == 1 and cache.get("k2") is not None and cache.disk_bytes == 0


def test_bounds_are_checked():
    with pytest.raises(LongMediaInputError, match="ram_mb"):
        RetakeCache(-MIB, 0)


def test_fingerprints_read_values_and_pin_what_they_know_by_identity():
    g = torch.Generator().manual_seed(5)
    t = torch.randn(4, 5, generator=g)
    assert Fingerprint().digest({"a": t, "b": [1, 2.5, "x"]}) == Fingerprint().digest({"b": [1, 2.5, "x"], "a": t.clone()})
    assert Fingerprint().digest(t) != Fingerprint().digest(t.to(torch.float64))
    bumped = t.clone()
    bumped[0, 0] += 1e-6
    assert Fingerprint().digest(t) != Fingerprint().digest(bumped)

    def scale(x, k=2.0):
        return x * k

    assert Fingerprint().digest(scale) == Fingerprint().digest(scale)
    assert Fingerprint().digest(lambda x: x * 2) != Fingerprint().digest(lambda x: x * 3)

    class Opts:
        def __init__(self, cfg):
            self.cfg = cfg

    assert Fingerprint().digest(Opts(3.0)) == Fingerprint().digest(Opts(3.0)) != Fingerprint().digest(Opts(4.0))
    module = torch.nn.Linear(2, 2)
    f = Fingerprint()
    digest = f.digest({"model": module, "weights": ByIdentity(module)})
    assert len(f.pins) == 2 and all(p() is module for p in f.pins)
    assert digest != Fingerprint().digest({"model": torch.nn.Linear(2, 2), "weights": 0})


def test_a_dead_pin_is_never_served():
    cache = RetakeCache(64 * MIB, 0)
    model = torch.nn.Linear(2, 2)
    f = Fingerprint()
    key = chain_key(None, f.digest(ByIdentity(model)), "s")
    cache.put(key, (torch.ones(2),), "r", tuple(f.pins))
    assert cache.get(key) is not None
    del model
    gc.collect()
    assert cache.get(key) is None and len(cache) == 0


def test_what_has_no_value_and_no_weak_reference_is_uncacheable():
    class Slotted:
        __slots__ = ()

    with pytest.raises(Uncacheable, match="Slotted"):
        Fingerprint().digest(Slotted())


def test_a_segment_without_a_digest_samples_it_and_every_later_one_and_says_why():
    cache = RetakeCache(64 * MIB, 0)
    first = RetakeChain(cache, "job")
    key = first.key("s0")
    first.lookup(0, key)
    first.store(key, (torch.randn(3),), "segment 0")
    chain = RetakeChain(cache, "job")
    keys = [chain.key("s0")]
    assert chain.lookup(0, keys[0]).record == "segment 0"
    chain.off_reason = "a Slotted value in segment 1"
    keys += [chain.key(None), chain.key("s2")]
    assert keys[1:] == [None, None]
    assert chain.lookup(1, None) is None and chain.lookup(2, None) is None and chain.sampled == [1, 2]
    assert chain.reused == [0]
    line = chain.report().line()
    assert "later segments not cached (a Slotted value in segment 1)" in line
    off = RetakeChain(cache, None, off_reason="no digest for the model")
    assert off.key("s0") is None and off.report().line().startswith("retakes: not used this run (no digest")
