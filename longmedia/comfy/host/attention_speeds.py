"""The exact backends' measured speeds for a job, as the planner's fact (`MeasuredSpeeds`), read in ComfyUI.

The timing itself is `attention/speed_timing.py`; this module owns its disk cache: `<ComfyUI user directory>/longmedia/
attention_speeds.json` (kept across restarts, unlike ComfyUI's temp directory), one entry per GPU, torch and CUDA
version, head_dim, dtype, length class and the timed code's fingerprint (`speed_timing.code_fingerprint`).
`LONGMEDIA_SPEED_PROBE=off` refuses the timing (auto then orders the exact backends by the static rank, and says so
in the plan's reasons). Only an auto or Sol job on a CUDA device times the backends, after the pass's residency boundary
(`pass_plan.measure_speeds`); a forecast reads the cache only (`measure=False`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import torch

from ...attention.speed_timing import SpeedCache, cached_speeds, time_speeds
from ...attention.speeds import MeasuredSpeeds

ENV_VAR = "LONGMEDIA_SPEED_PROBE"
OFF = ("0", "off", "no", "false")
TIMED_MODES = ("auto", "sol", "scheduled_sol")


def speed_cache() -> SpeedCache:
    """The timing cache in ComfyUI's user directory (this ComfyUI's; `--user-directory` moves it)."""
    import folder_paths

    return SpeedCache(Path(folder_paths.get_user_directory()) / "longmedia")


def attention_speeds(load_device, *, attention_mode: str, head_dim: int, seq_len: int,
                     dtype: torch.dtype = torch.bfloat16, cache: SpeedCache | None = None,
                     environ: Mapping[str, str] | None = None, measure: bool = True) -> MeasuredSpeeds | None:
    """The speeds auto orders the exact backends by; None for `existing` (nothing to order). A refused timing (the
    environment switch, CPU) is a `MeasuredSpeeds` carrying only why, so the plan's reasons can say it.

    measure: time what the cache lacks on the device (GPU work: run it after the residency boundary, `pass_plan.
    measure_speeds`); False reads the cache only, and None where it lacks a candidate (a forecast's plan)."""
    if attention_mode not in TIMED_MODES:
        return None
    dtype_name = str(dtype).removeprefix("torch.")
    env = (os.environ if environ is None else environ).get(ENV_VAR, "").strip().lower()
    if env in OFF:
        return MeasuredSpeeds.none(f"{ENV_VAR}={env}", head_dim=head_dim, dtype=dtype_name, seq_len=seq_len)
    from ...attention.backends import default_registry

    if not measure:
        return cached_speeds(default_registry(), speed_cache() if cache is None else cache, device=load_device,
                             head_dim=head_dim, dtype=dtype, seq_len=seq_len)
    speeds = time_speeds(default_registry(), speed_cache() if cache is None else cache, device=load_device,
                          head_dim=head_dim, dtype=dtype, seq_len=seq_len)
    if speeds.seconds and not speeds.cached:  # timed now: hand the timing's freed blocks back before models load
        import comfy.model_management

        comfy.model_management.soft_empty_cache()
    return speeds
