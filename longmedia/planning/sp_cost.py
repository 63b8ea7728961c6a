"""The sequence-parallel share of a plan: a rank's rows and heads, its link bytes, its host RAM, and the
expected speedup from the cost model in `types.SequenceParallelPlan` (measured block fit, `stage_times`).

Host RAM is planned per rank: every rank is its own process with its own copy of the weights (ComfyUI's loader
in each worker), so one host holding N ranks needs N x the weights in RAM, and the page-locked budget is split
evenly (each rank pins at most pinned_budget / N).
"""

from __future__ import annotations

from dataclasses import replace

from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, ModelProfile
from ..parallel.cost import link_bytes_per_block, rank_rows
from ..parallel.partition import head_counts
from .stage_times import ASSUMED_HOST_GBPS, block_fit, card_class
from .types import SequenceParallelPlan

ASSUMED_LINK_GBPS = ASSUMED_HOST_GBPS  # PCIe 4.0 x16 between two cards (assumed when neither measured nor declared)


def rank_device(device: DeviceProfile, degree: int) -> DeviceProfile:
    """The host as one of `degree` ranks on it sees it: RAM and the pinned budget split evenly."""
    if degree <= 1:
        return device
    return replace(device, ram_available_bytes=device.ram_available_bytes // degree,
                   pinned_budget_bytes=device.pinned_budget_bytes // degree)


def sp_share(model: ModelProfile, device: DeviceProfile, geometry: Geometry, degree: int,
             link_gbps: float | None, link_source: str, pinned_bytes: int) -> SequenceParallelPlan:
    """One rank's share of `geometry`'s pass on `degree` ranks, timed by the cost model."""
    s, rows = geometry.seq_len, rank_rows(geometry.seq_len, degree)
    a, b = block_fit()
    speed = card_class(device.vram_total_bytes).speed_vs_h200
    gbps = link_gbps if link_gbps is not None else ASSUMED_LINK_GBPS
    link = link_bytes_per_block(s, degree, model.dims, model.compute_dtype_bytes)
    return SequenceParallelPlan(
        degree=degree, rows_per_rank=rows, heads_per_rank=head_counts(model.dims.heads, degree),
        link_bytes_per_block=link, link_gbps=gbps, link_source=link_source if link_gbps is not None else "assumed",
        block_seconds_single=(a * s + b * s * s) / speed, block_seconds_rank_compute=(a * rows + b * s * rows) / speed,
        block_seconds_link=link / (gbps * 1e9), host_ram_bytes_per_rank=model.weight_bytes,
        pinned_bytes_per_rank=pinned_bytes)


def describe(sp: SequenceParallelPlan, blocks: int) -> str:
    gb = sp.link_bytes_per_block / 1e9
    heads = sorted(set(sp.heads_per_rank), reverse=True)
    return (f"sequence parallel on {sp.degree} ranks (Ulysses): each rank holds {sp.rows_per_rank} rows and "
            f"{'/'.join(map(str, heads))} of {sum(sp.heads_per_rank)} heads; per block a rank sends {gb:.2f} GB in "
            f"two all-to-alls over a {sp.link_gbps:g} GB/s link ({sp.link_source}); cost model per block: one "
            f"device {sp.block_seconds_single * 1e3:.1f} ms, a rank {sp.block_seconds_rank_compute * 1e3:.1f} ms "
            f"compute + {sp.block_seconds_link * 1e3:.1f} ms link: expected speedup x{sp.expected_speedup:.2f} "
            f"({blocks} blocks a model call); host RAM per rank: its own {sp.host_ram_bytes_per_rank / 2**30:.1f} "
            f"GiB copy of the weights, {sp.pinned_bytes_per_rank / 2**30:.1f} GiB of it pinned "
            f"(the pinned budget split {sp.degree} ways)")
