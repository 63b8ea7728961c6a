"""The card bench's host-RAM table (`python -m bench.cards --host-table OUT/cards.jsonl ...`): per card, sampler
and ComfyUI arguments, each host RAM limit's result and s/step, its s/step over the unconstrained row's, and
what the host gave: RSS peak (anon / file), pinned peak, disk read per model call, MemAvailable's minimum and the
disk's cold read speed."""

from __future__ import annotations

GIB = 2 ** 30


def _args(row: dict) -> tuple[str, ...]:
    return tuple(row.get("comfy_args") or ())


def _same_job(a: dict, b: dict, sampler: str | None = None) -> bool:
    """Same card, format, job length and LoRA rank, and the sampler `sampler` (default: `b`'s)."""
    return (a.get("sampler") == (b.get("sampler") if sampler is None else sampler)
            and all(a.get(k) == b.get(k) for k in ("card_gib", "format", "seconds"))
            and int(a.get("lora_rank") or 0) == int(b.get("lora_rank") or 0))


def _label(row: dict) -> str:
    rank = int(row.get("lora_rank") or 0)
    return row["sampler"] + (f" + LoRA r{rank}" if rank else "")


def unconstrained_ratio(row: dict, rows: list[dict]) -> tuple[float | None, str]:
    """`row`'s s/step over the unconstrained (host_ram_gib None) completed row of the same card, sampler, format,
    job length, LoRA rank and ComfyUI arguments; where none has those arguments, over the flag-free one, said as
    "vs no flags"; for a LongMedia control (`longmedia_<control>`) without an unconstrained row of its own, over
    `longmedia`'s, said as "vs longmedia". (None, "") when either s/step is missing."""
    if row.get("s_per_step") is None:
        return None, ""

    def free(sampler: str | None) -> list[dict]:
        return [r for r in rows if r.get("host_ram_gib") is None and not r.get("extra") and r.get("result") == "ok"
                and r.get("s_per_step") and _same_job(r, row, sampler)]

    candidates = [("", _args(row), None), ("vs no flags", (), None)]
    if str(row.get("sampler", "")).startswith("longmedia_"):
        candidates.append(("vs longmedia", (), "longmedia"))
    for basis, wanted, sampler in candidates:
        ref = next((r for r in free(sampler) if _args(r) == wanted), None)
        if ref is not None:
            return row["s_per_step"] / ref["s_per_step"], basis
    return None, ""


def _g(n) -> str:
    return "-" if n is None else f"{n / GIB:.2f}"


def host_table(rows: list[dict]) -> str:
    main = [r for r in rows if not r.get("extra") and "sampler" in r]
    head = ("| card GiB | sampler | ComfyUI args | host RAM GiB | limit | result | s/step | x unconstrained | "
            "RSS peak GiB (anon / file) | pinned peak GiB | disk read / model call GiB | MemAvailable min GiB | "
            "disk GB/s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def order(r: dict):
        ram = r.get("host_ram_gib")
        return (r["card_gib"], _label(r), _args(r), r.get("format", ""), r.get("seconds", 0),
                ram is not None, -(ram or 0))

    for r in sorted(main, key=order):
        ratio, basis = unconstrained_ratio(r, main)
        x = "-" if ratio is None else f"{ratio:.2f}" + (f" ({basis})" if basis else "")
        sps = "-" if r.get("s_per_step") is None else f"{r['s_per_step']:.2f}"
        ram = "all" if r.get("host_ram_gib") is None else f"{r['host_ram_gib']:g}"
        gbps = "-" if r.get("disk_read_gbps") is None else f"{r['disk_read_gbps']:.2f}"
        lines.append(f"| {r['card_gib']:g} | {_label(r)} | {' '.join(_args(r)) or '-'} | {ram} | "
                     f"{r.get('host_ram_limit') or '-'} | {r.get('result', '-')} | {sps} | {x} | "
                     f"{_g(r.get('rss_peak_bytes'))} ({_g(r.get('rss_anon_peak_bytes'))} / "
                     f"{_g(r.get('rss_file_peak_bytes'))}) | {_g(r.get('pinned_peak_bytes'))} | "
                     f"{_g(r.get('disk_read_per_call_bytes'))} | {_g(r.get('mem_available_min_bytes'))} | {gbps} |")
    return "\n".join(lines)
