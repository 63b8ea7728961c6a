"""The pass/fail checks of the card bench's extras, as pure functions over cards.jsonl rows (no torch, no ComfyUI).

Each `check_*` returns a check row: {"label", "check": "pass" | "fail", "detail"} (merged into the extra's
row by the child). Tolerances are named here; the unit tests are tests/core/test_cards_checks.py.
"""

from __future__ import annotations

import json
import re

from longmedia.units import MIB

BYTES_TOLERANCE = 128 * MIB        # plan / boundary byte figures that differ by less are "same"
TORCH_BACK_TOLERANCE = 64 * MIB    # torch allocated after an interrupt vs. idle with the model loaded
PROCESS_BACK_TOLERANCE = 256 * MIB  # the process's device memory (NVML) less comfy-aimdo's, same comparison
STEP_TIME_TOLERANCE = 0.05         # segment 3's s/step within 5 % of segment 1's, rows like for like
EXTRAS = ("oom", "seeds", "interrupt", "segmented", "sol", "scheduled_sol")  # the extras' names, in run order
HOST_RAM_FIGURES = ("ram_available", "ram_headroom")  # the host's free RAM and what the plan derives from it

# the advice (OOM report's pressure point) that fits each phase, by whether the blocks ran stock (normal mode)
# or streamed (low_vram / ultra_low_vram): longmedia/report/oom.py pressure_point, read as the user would
ADVICE = {
    "normal": {
        "before_block_0": ("segment_seconds", "reference_budget"),
        "qkv": ("memory_mode",),
        "attention": ("memory_mode",),
        "mlp": ("mlp_chunk_tokens",),
        "final_output": ("memory_mode",),
        "prefetch_transport": ("--disable-async-offload",),
    },
    "streamed": {
        "before_block_0": ("segment_seconds", "reference_budget"),
        "qkv": ("sol_qkv_chunk_tokens", "memory_mode", "segment_seconds"),
        "attention": ("sol_qkv_chunk_tokens", "memory_mode", "segment_seconds"),
        "mlp": ("mlp_chunk_tokens", "segment_seconds"),
        "final_output": ("late_block_guard_target_mb",),
        "prefetch_transport": ("--disable-async-offload",),
    },
}
OOM_PHASES = tuple(ADVICE["normal"])


def _row(label: str, ok: bool, detail: str, **extra) -> dict:
    return {"label": label, "check": "pass" if ok else "fail", "detail": detail, **extra}


def _mib(n: float) -> str:
    return f"{n / MIB:+.0f} MiB"


# ---------------------------------------------------------------- JSON differences

def _flatten(value, path: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{path}.{k}" if path else str(k)))
        return out or {path: {}}
    if isinstance(value, (list, tuple)):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{path}[{i}]"))
        return out or {path: []}
    return {path: value}


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def differences(a, b, tolerance: int = BYTES_TOLERANCE) -> tuple[list[str], list[str]]:
    """(differences, tolerated) between two JSON values, as 'path: a -> b' lines.

    Tolerated: byte figures (a key ending in `_bytes`, or any integer above 1 MiB) within `tolerance`, the
    host's available RAM and the headroom derived from it (they move between any two runs and only gate
    pinning, whose decision is compared itself),
    and text that differs only in its numbers (reasons quoting GiB figures). Everything else is a difference.
    """
    fa, fb = _flatten(a), _flatten(b)
    diff, tolerated = [], []
    for path in sorted(set(fa) | set(fb), key=lambda p: (p.count(".") + p.count("["), p)):  # decisions first
        x, y = fa.get(path, "<absent>"), fb.get(path, "<absent>")
        if x == y:
            continue
        line = f"{path}: {x!r} -> {y!r}"
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
        if numeric and (path.endswith("_bytes") or max(abs(x), abs(y)) > MIB) and abs(x - y) <= tolerance:
            tolerated.append(f"{path}: {_mib(y - x)}")
        elif any(key in path for key in HOST_RAM_FIGURES):
            tolerated.append(line)
        elif isinstance(x, str) and isinstance(y, str) and _NUMBER.sub("#", x) == _NUMBER.sub("#", y):
            tolerated.append(f"{path}: numbers in the text")
        else:
            diff.append(line)
    return diff, tolerated


def _load(value):
    return json.loads(value) if isinstance(value, str) else value


# ---------------------------------------------------------------- boundary snapshots

_SNAPSHOT = re.compile(r"(\w+)=(None|-?\d+|'[^']*')")


def parse_snapshot(text: str) -> dict:
    """A `MemorySnapshot(...)` repr (the boundary's 'before: ' / 'after: ' lines) as a dict of its fields."""
    out = {}
    for key, raw in _SNAPSHOT.findall(text):
        out[key] = None if raw == "None" else raw.strip("'") if raw.startswith("'") else int(raw)
    return out


def boundary_view(boundaries) -> dict:
    """What the plan reads after the last residency boundary of a run: its steps (done / skipped) and the memory
    after it: torch allocated and reserved, and the bytes the plan counts as available (free + the weight pages
    comfy-aimdo can give back); the raw snapshots are kept for the detail."""
    if not boundaries:
        return {}
    lines = list(boundaries[-1])
    before = next((parse_snapshot(x) for x in lines if x.startswith("before: ")), {})
    after = next((parse_snapshot(x) for x in lines if x.startswith("after: ")), {})
    steps = [x for x in lines if not x.startswith(("before: ", "after: "))]
    free = after.get("free_bytes")
    plannable = None if free is None else free + (after.get("aimdo_vbar_reclaimable_bytes") or 0)
    return {"steps": steps, "after_allocated_bytes": after.get("allocated_bytes"),
            "after_reserved_bytes": after.get("reserved_bytes"), "after_plannable_bytes": plannable,
            "before": before, "after": after}


# ---------------------------------------------------------------- 1. seed-only reruns

def check_seed_reruns(rows: list[dict]) -> dict:
    """Three seed-only reruns start from the same boundary snapshot and the same plan.

    Same plan: the plan JSONs equal, byte figures within BYTES_TOLERANCE (text numbers and host RAM aside).
    Same boundary: the same steps done / skipped, and after it the same torch allocated / reserved and the same
    bytes available to the plan (free + reclaimable VBAR pages), within BYTES_TOLERANCE. The raw before/after
    snapshots differ by design (a rerun finds the previous run's weights resident) and are listed, not judged.
    """
    label = "check: seed-only reruns, same boundary snapshot and plan"
    ok_rows = [r for r in rows if r.get("result") == "ok"]
    if len(rows) < 3 or len(ok_rows) < len(rows):
        return _row(label, False, f"{len(ok_rows)} of {len(rows)} reruns completed: "
                    + "; ".join(f"{r.get('label')}: {r.get('result')} {r.get('error', '')[:120]}" for r in rows))
    plans = [_load(r.get("plan_json")) for r in rows]
    views = [boundary_view(r.get("boundaries")) for r in rows]
    if any(p is None for p in plans) or any(not v for v in views):
        return _row(label, False, "a rerun has no plan_json or no boundary in its report")
    problems, notes = [], []
    for i in range(1, len(rows)):
        diff, tolerated = differences(plans[0], plans[i])
        if diff:
            problems.append(f"plan of {rows[i]['label']} differs from {rows[0]['label']}: " + "; ".join(diff[:8])
                            + (f" (+{len(diff) - 8} more)" if len(diff) > 8 else ""))
        notes += [f"plan {rows[i]['label']}: {t}" for t in tolerated[:4]]
        a, b = views[0], views[i]
        if a["steps"] != b["steps"]:
            problems.append(f"boundary steps of {rows[i]['label']}: " + "; ".join(
                sorted(set(b["steps"]) ^ set(a["steps"]))))
        for key in ("after_allocated_bytes", "after_reserved_bytes", "after_plannable_bytes"):
            x, y = a.get(key), b.get(key)
            if x is None or y is None:
                if x != y:
                    problems.append(f"boundary {key} of {rows[i]['label']}: {x} -> {y}")
            elif abs(y - x) > BYTES_TOLERANCE:
                problems.append(f"boundary {key} of {rows[i]['label']}: {_mib(y - x)}")
            elif y != x:
                notes.append(f"boundary {key} {rows[i]['label']}: {_mib(y - x)}")
        raw = [f"{k} {_mib((b['before'].get(k) or 0) - (a['before'].get(k) or 0))}"
               for k in ("free_bytes", "aimdo_vram_usage_bytes") if b["before"].get(k) != a["before"].get(k)]
        if raw:
            notes.append(f"before the boundary, {rows[i]['label']} vs {rows[0]['label']}: " + ", ".join(raw))
    same = "same plan and boundary" + (" (within tolerance: " + "; ".join(notes[:6]) + ")" if notes else "")
    return _row(label, not problems, "; ".join(problems) if problems else same)


# ---------------------------------------------------------------- 2. interrupt, then a rerun

def check_interrupt(interrupted: dict, idle: dict | None, after: dict | None, rerun: dict | None,
                    fresh: dict | None) -> dict:
    """An interrupt mid step 1 ends the prompt as interrupted; memory comes back; the rerun equals a fresh run.

    interrupted: the row of the interrupted prompt (result, steps_done, interrupt_call);
    idle / after: memory readings {torch_allocated, process, aimdo_usage} with the model loaded and no prompt
    running, before the interrupted prompt and after it (after ComfyUI's prompt-worker clean-up: gc.collect,
    soft_empty_cache); rerun / fresh: the rerun's row and a fresh run's row of the same prompt (stats.checksum).
    """
    label = "check: interrupt mid step 1, memory back, rerun equals a fresh run"
    problems, facts = [], []
    if interrupted.get("result") != "interrupted":
        problems.append(f"the prompt ended {interrupted.get('result')!r}, not interrupted "
                        f"{interrupted.get('error', '')[:160]}")
    elif interrupted.get("steps_done") != 0:
        problems.append(f"interrupted after {interrupted.get('steps_done')} finished steps, not during step 1")
    else:
        facts.append(f"interrupted in step 1 at interrupt check {interrupted.get('interrupt_call')}")
    if not idle or not after:
        problems.append("no memory readings around the interrupted prompt")
    else:
        d_torch = after["torch_allocated"] - idle["torch_allocated"]
        (problems if d_torch > TORCH_BACK_TOLERANCE else facts).append(f"torch allocated {_mib(d_torch)}")
        if idle.get("process") is not None and after.get("process") is not None:
            d_proc = ((after["process"] - (after.get("aimdo_usage") or 0))
                      - (idle["process"] - (idle.get("aimdo_usage") or 0)))
            (problems if d_proc > PROCESS_BACK_TOLERANCE else facts).append(
                f"process (NVML) less comfy-aimdo's {_mib(d_proc)} (raw process {_mib(after['process'] - idle['process'])})")
        else:
            facts.append("no NVML per-process reading")
    sums = []
    for name, row in (("rerun", rerun), ("fresh run", fresh)):
        stats = (row or {}).get("stats") or {}
        if (row or {}).get("result") != "ok" or "checksum" not in stats:
            problems.append(f"{name}: {(row or {}).get('result', 'not run')} {(row or {}).get('error', '')[:160]}")
        sums.append(stats.get("checksum"))
    if None not in sums:
        if sums[0] == sums[1]:
            facts.append(f"rerun checksum == fresh ({sums[0]!r})")
        else:
            problems.append(f"rerun checksum {sums[0]!r} != fresh {sums[1]!r}")
            pa, pb = _load((rerun or {}).get("plan_json")), _load((fresh or {}).get("plan_json"))
            if pa is not None and pb is not None:
                diff, _ = differences(pb, pa, tolerance=0)
                problems.append("plans: " + ("identical" if not diff else "; ".join(diff[:6])))
    return _row(label, not problems, "; ".join(problems + facts))


# ---------------------------------------------------------------- 3. segmented drift

def segment_summary(report: dict) -> list[dict]:
    """Per pass of a SegmentedReport's JSON: index, s/step, packed rows, mode, model-call seconds."""
    out = []
    for s in report.get("segments") or []:
        run = s.get("run") or {}
        plan = run.get("plan") or {}
        out.append({"index": s.get("index"), "seconds_per_step": s.get("seconds_per_step"),
                    "pass_frames": s.get("pass_frames"), "context_frames": s.get("context_frames"),
                    "seq_len": (plan.get("geometry") or {}).get("seq_len"), "memory_mode": plan.get("memory_mode"),
                    "call_seconds": [st.get("seconds") for st in run.get("steps") or []],
                    "peak_bytes": s.get("peak_bytes")})
    return out


def _warm_step(summary: dict) -> float | None:
    """A pass's s/step without its first step (compiles and autotunes run there): its last model call's seconds
    when it made two or more (cfg 1: one call per step), else the pass's sampler loop / steps."""
    calls = [c for c in summary.get("call_seconds") or [] if c]
    return calls[-1] if len(calls) >= 2 else summary.get("seconds_per_step")


def expected_ratio(rows_from: int | None, rows_to: int | None) -> float:
    """What a pass of `rows_to` packed rows costs per step against one of `rows_from`, from the product's own
    measured block-time fit (`planning.stage_times.h200_block_seconds`, a*S + b*S^2); 1.0 when the rows are
    equal or unknown."""
    if not rows_from or not rows_to or rows_from == rows_to:
        return 1.0
    from longmedia.planning.stage_times import h200_block_seconds

    return h200_block_seconds(rows_to) / h200_block_seconds(rows_from)


def check_segmented(row: dict) -> dict:
    """A 3-pass segmented job does not drift: segment 3's s/step within STEP_TIME_TOLERANCE of segment 1's, on
    warm steps (`_warm_step`), once the rows are like for like. The passes have equal frames, but the context
    guide adds packed rows to passes 2 and 3, and a step's cost grows with the rows (quadratically in attention),
    so the 3:1 ratio is divided by what the rows alone predict (`expected_ratio`; 1.0 for equal rows, which is
    the plain 5 % rule). Passes 2 and 3 carry the same rows, so their ratio must also be within the tolerance."""
    label = "check: segmented 3 passes, segment 3 s/step within 5 % of segment 1 (rows like for like)"
    if row.get("result") != "ok":
        return _row(label, False, f"{row.get('result')}: {row.get('error', '')[:200]}")
    passes = row.get("segments") or []
    if len(passes) < 3:
        return _row(label, False, f"{len(passes)} passes ran, 3 wanted")
    warm = [_warm_step(p) for p in passes]
    first, third = warm[0], warm[2]
    if not first or not third:
        return _row(label, False, f"no s/step measured: {first} / {third}")
    rows = [p.get("seq_len") for p in passes]
    ratio = third / first
    expected = expected_ratio(rows[0], rows[2])
    drift = ratio / expected
    detail = (f"s/step (last model call of each pass) {' / '.join(f'{t:.2f}' for t in warm)}; rows "
              f"{' / '.join(str(r) for r in rows)}; ratio 3:1 {ratio:.3f}, rows alone predict {expected:.3f}, "
              f"drift 3:1 {drift:.3f}")
    problems = [] if abs(drift - 1) <= STEP_TIME_TOLERANCE else [f"drift 3:1 {drift:.3f} is past 5 %"]
    if warm[1]:
        same_rows = expected_ratio(rows[1], rows[2])
        drift32 = third / warm[1] / same_rows
        detail += f"; drift 3:2 {drift32:.3f}"
        if abs(drift32 - 1) > STEP_TIME_TOLERANCE:
            problems.append(f"drift 3:2 {drift32:.3f} is past 5 %")
    whole = " / ".join(f"{p.get('seconds_per_step') or 0:.2f}" for p in passes)
    detail += (f"; sampler loop / steps {whole}; modes {' / '.join(str(p.get('memory_mode')) for p in passes)}")
    if drift < 1 - STEP_TIME_TOLERANCE:
        detail += "; segment 3 is faster: segment 1 carried a warm-up"
    return _row(label, not problems, "; ".join(problems + [detail]), step_time_ratio=ratio, expected_ratio=expected,
                drift=drift)


# ---------------------------------------------------------------- 4. injected OOM

_WHERE = re.compile(r"ran out of .*? in phase (\w+)(?:, block (\d+))?\.")
_ADVICE = re.compile(r"change next: (.+?): (.*)", re.S)


def parse_oom(message: str) -> dict | None:
    """Phase, block, pressure point and next step from a LongMedia OOM report's text (ComfyUI's
    execution_error exception_message); None when the text is no LongMedia OOM report."""
    where, advice = _WHERE.search(message or ""), _ADVICE.search(message or "")
    if where is None or advice is None:
        return None
    return {"phase": where.group(1), "block": int(where.group(2)) if where.group(2) else None,
            "pressure_point": advice.group(1).strip(), "next_step": advice.group(2).strip().splitlines()[0]}


def check_oom(row: dict, injected: str, blocks_streamed: bool, memory_back: bool | None) -> dict:
    """An OOM injected in phase `injected` is reported as that phase with advice fitting it (ADVICE), and the next
    row starts with memory back (`memory_back`: torch allocated at the next row's start is the level before this
    one; None when not measured)."""
    label = f"check: injected OOM in {injected}"
    mode = "streamed" if blocks_streamed else "normal"
    if row.get("result") != "OOM":
        return _row(label, False, f"the prompt ended {row.get('result')!r}, not OOM: {row.get('error', '')[:200]}")
    got = parse_oom(row.get("error_full") or row.get("error") or "")
    if got is None:
        return _row(label, False, f"no LongMedia OOM report in the error: {row.get('error', '')[:200]}")
    problems = []
    if got["phase"] != injected:
        problems.append(f"reported phase {got['phase']} != injected {injected}")
    allowed = ADVICE[mode][injected]
    if not any(got["pressure_point"].startswith(a) for a in allowed):
        problems.append(f"advice {got['pressure_point']!r} is not {injected}'s in {mode} mode ({', '.join(allowed)})")
    if memory_back is False:
        problems.append("memory was not back at the next row's start")
    detail = (f"phase {got['phase']}, block {got['block']}; change next: {got['pressure_point']}: "
              f"{got['next_step'][:120]}")
    return _row(label, not problems, "; ".join(problems + [detail]), reported_phase=got["phase"],
                reported_block=got["block"], pressure_point=got["pressure_point"])


# ---------------------------------------------------------------- the extras table

def extras_table(rows: list[dict]) -> str:
    """The second table: every extra row (label, result, check, detail)."""
    head = "| extra | weights / blocks | result | s/step | check | detail |"
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        if "check" not in r:
            continue
        sps = "-" if r.get("s_per_step") is None else f"{r['s_per_step']:.2f}"
        detail = str(r.get("detail", "")).replace("|", "/").replace("\n", " ")
        lines.append(f"| {r.get('label')} | {r.get('format', '-')} / {r.get('blocks', '-')} | {r.get('result', '-')} | "
                     f"{sps} | {r['check']} | {detail[:400]} |")
    return "\n".join(lines)
