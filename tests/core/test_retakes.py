"""Retakes without ComfyUI: the hash chain, the bounded cache (RAM, then the spill folder), identity pins, and the
property that a run resamples exactly the first segment no earlier run shared a prefix with, and all after it."""

from __future__ import annotations

import copy
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
    """One job of len(inputs) segments through a RetakeChain's calls (key, lookup, store on a miss) with a fake pass:
    the chain's keys under test, not the product's loop, which is held to the same rule by
    tests/comfyui/test_directed_segments.py (`run_segmented` on the tiny checkpoints, over a history of edits)."""
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


def test_every_segment_is_stored_at_once_the_newest_kept_in_ram_and_the_oldest_dropped_past_the_disk_bound(
        tmp_path):
    g = torch.Generator().manual_seed(3)
    tensors = [torch.randn(MIB // 4, generator=g) for _ in range(6)]    # 1 MiB each (float32), a little more on disk
    cache = RetakeCache(2 * MIB, 4 * MIB, tmp_path)
    for i, t in enumerate(tensors):
        cache.put(f"k{i}", (t,), i)
        assert cache.ram_bytes <= 2 * MIB and cache.disk_bytes <= 4 * MIB
    assert len(cache) == 3 and cache.get("k0") is None                  # the three oldest dropped
    report = cache.report()
    assert report.ram_bytes == 2 * MIB and 3 * MIB < report.disk_bytes <= 4 * MIB and report.evicted == 3
    assert report.spilled == 6 and sorted(p.stem for p in cache.spill_dir.glob("*.pt")) == ["k3", "k4", "k5"]
    for i in range(3, 6):                                                # stored ones come back bit for bit
        hit = cache.get(f"k{i}")
        assert hit.record == i and torch.equal(hit.tensors[0], tensors[i])
    hit.tensors[0].add_(1.0)                                             # a served copy, never the stored one
    assert torch.equal(cache.get("k5").tensors[0], tensors[5])
    spill = cache.spill_dir
    cache.clear()
    assert len(cache) == 0 and not spill.exists()


def test_a_later_cache_over_the_same_folder_serves_what_an_earlier_one_stored(tmp_path):
    """Issue 49: a prompt between two retakes made ComfyUI drop the Retakes node's output (this object) and every
    segment was sampled again. The segments are in the durable store, found by any later cache by key."""
    g = torch.Generator().manual_seed(6)
    tensors = [torch.randn(64, generator=g) for _ in range(3)]
    first = RetakeCache(64 * MIB, 64 * MIB, tmp_path)
    records = [{"index": i, "seconds": float("inf") if i else 1.5, "range": (i, i + 1)} for i in range(3)]
    for i, t in enumerate(tensors):
        first.put(f"k{i}", (t, t * 2), records[i])
    del first
    gc.collect()
    later = RetakeCache(0, 64 * MIB, tmp_path)                          # the next queue's fresh cache
    assert len(later) == 3
    for i in range(3):
        hit = later.get(f"k{i}")
        assert hit.record == records[i] and torch.equal(hit.tensors[1], tensors[i] * 2)
    assert later.report().reused == () and later.report().entries == 3
    other_code = RetakeCache(64 * MIB, 64 * MIB, tmp_path, fingerprint="other")   # another LongMedia: never read
    assert other_code.get("k0") is None and len(other_code) == 0 and not later.spill_dir.exists()


def test_a_key_with_identity_parts_stays_in_its_cache_and_its_files_go_with_it(tmp_path):
    model = torch.nn.Linear(2, 2)
    f = Fingerprint()
    key = chain_key(None, f.digest(ByIdentity(model)), "s")
    cache = RetakeCache(0, 64 * MIB, tmp_path)
    cache.put(key, (torch.ones(MIB // 4),), "r", tuple(f.pins))
    assert list(cache.spill_dir.glob("*.pt")) == [] and len(list(cache.spill_dir.glob("*.private"))) == 1
    assert cache.get(key).record == "r" and cache.disk_bytes == MIB
    assert RetakeCache(0, 64 * MIB, tmp_path).get(key) is None           # an id is no key for another cache
    chain = RetakeChain(cache, "job", tuple(f.pins))
    chain.store(chain.key("s0"), (torch.ones(2),), "r")
    assert "knows a Linear by identity" in chain.report().notes()[0]
    folder = cache.spill_dir
    del cache, chain
    gc.collect()
    assert list(folder.glob("*.private")) == []


def test_a_missing_or_damaged_spill_file_samples_that_segment_again(tmp_path):
    """Issue 49: spill files deleted from ComfyUI's temp folder (raw FileNotFoundError) or cut short (raw OSError)
    failed every later retake. Now that segment is a miss: dropped, counted, said in the report."""
    g = torch.Generator().manual_seed(4)
    tensors = [torch.randn(MIB // 4, generator=g) for _ in range(4)]
    cache = RetakeCache(1 * MIB, 8 * MIB, tmp_path)
    for i, t in enumerate(tensors):
        cache.put(f"k{i}", (t,), i)
    files = sorted(cache.spill_dir.glob("*.pt"))
    assert len(files) == 4
    (cache.spill_dir / "k0.pt").unlink()
    damaged = cache.spill_dir / "k1.pt"
    damaged.write_bytes(damaged.read_bytes()[:100])
    assert cache.get("k0") is None and cache.get("k1") is None
    assert torch.equal(cache.get("k2").tensors[0], tensors[2]) and len(cache) == 2
    report = cache.report()
    assert report.unreadable == 2 and "2 stored segment file(s) were missing or damaged" in report.notes()[0]


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
    g = torch.Generator().manual_seed(189)
    cache = RetakeCache(1 * MIB, 8 * MIB, tmp_path)
    for i in range(3):
        cache.put(f"k{i}", (torch.randn(MIB // 4, generator=g),), i)
    assert len(cache) == 1 and cache.get("k2") is not None and cache.disk_bytes == 0
    assert list(cache.spill_dir.glob("*")) == []
    report = cache.report()
    assert "PytorchStreamWriter failed" in report.spill_error and "could not spill" in report.notes()[0]


def test_without_a_spill_folder_the_ram_bound_drops_the_oldest():
    g = torch.Generator().manual_seed(199)
    cache = RetakeCache(1 * MIB, 8 * MIB, None)
    for i in range(3):
        cache.put(f"k{i}", (torch.randn(MIB // 4, generator=g),), i)
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
    module = torch.nn.Linear(1024, 4097)                                 # over 16 MiB: a model's weights
    f = Fingerprint()
    digest = f.digest({"model": module, "weights": ByIdentity(module)})
    assert len(f.pins) == 2 and all(p() is module for p in f.pins)
    assert digest != Fingerprint().digest({"model": torch.nn.Linear(2, 2), "weights": 0})
    small = torch.nn.Linear(2, 2)                                        # a small module (a model_sampling patch):
    f = Fingerprint()                                                    # by value, no pin
    assert f.digest(small) == Fingerprint().digest(copy.deepcopy(small)) and f.pins == []
    changed = copy.deepcopy(small)
    with torch.no_grad():
        changed.bias += 1
    assert Fingerprint().digest(changed) != f.digest(small)


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
    first.store(key, (torch.randn(3, generator=torch.Generator().manual_seed(267)),), "segment 0")
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


def test_a_record_round_trips_through_its_json_form_and_names_only_longmedia_classes():
    """What the durable store writes beside a segment: LongMedia's frozen dataclasses of plain values (the run
    report), read back equal; a class outside LongMedia is neither written nor read (no file builds one)."""
    import dataclasses
    import enum

    from longmedia.planning.types import PlanRequest, SolSettings
    from longmedia.segments.record_codec import RecordCodecError, decode_record, encode_record

    request = PlanRequest(memory_mode="low_vram", mlp_chunk_tokens=4096, sol=SolSettings())
    record = {"request": request, "dtype": torch.bfloat16, "peaks": (1, float("inf")), ("a", 2): [None, True],
              "nan": float("nan")}
    back = decode_record(encode_record(record))
    assert back["request"] == request and back["dtype"] is torch.bfloat16 and back[("a", 2)] == [None, True]
    assert back["peaks"] == (1, float("inf")) and back["nan"] != back["nan"]

    @dataclasses.dataclass(frozen=True)
    class Foreign:
        x: int = 1

    class Colour(enum.Enum):
        RED = 1

    for value in (Foreign(), Colour.RED, object()):
        with pytest.raises(RecordCodecError):
            encode_record(value)
    for text in ('{"dataclass":"os:system","fields":{}}', '{"enum":"subprocess:Popen","value":1}',
                 '{"dataclass":"longmedia.segments.retakes:chain_key","fields":{}}'):
        with pytest.raises(RecordCodecError):
            decode_record(text)
