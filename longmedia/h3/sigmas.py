"""H3's sigma schedule as ComfyUI builds it, without torch: the flow shift of H3's model sampling and the `simple`
scheduler of the shipped workflows (BasicScheduler, scheduler "simple", then res_multistep: one model call per step,
at the step's sigma; the trailing 0 is never a model call).

Where each piece comes from (ComfyUI 0.33.0, the same in upstream 0.38):

- `comfy/supported_models.py` `MiniMaxH3.sampling_settings`: shift 12.0 (audio_shift 3.0 only scales the audio
  stream); `comfy/model_base.py` `MiniMaxH3` is `ModelType.FLOW_AV`, so `model_sampling` is
  `comfy/model_sampling.py` `ModelSamplingAV(ModelSamplingDiscreteFlow)`.
- `ModelSamplingDiscreteFlow.set_parameters`: a table of 1000 float32 sigmas, entry i - 1 being
  `time_snr_shift(shift, ((i / 1000) * 1000) / 1000)` for i = 1..1000, each operation in float32.
- `ModelSamplingDiscreteFlow.percent_to_sigma(p)`: 1.0 at p <= 0, 0.0 at p >= 1, else `time_snr_shift(shift, 1 - p)`
  in Python floats (float64).
- `comfy/samplers.py` `simple_scheduler`: step x's sigma is the table's entry -(1 + int(x * 1000 / steps)); then 0.

Every float32 operation is emulated (`f32`: +, -, *, / of float32 inputs done in float64 and rounded to float32 give
the correctly rounded float32 result), so the sigmas equal ComfyUI's bit for bit (tests/comfyui/test_easycache_bound.py
compares them) and a sigma at a window's edge compares as torch compares it: a float32 tensor against a Python float
is compared in float32 (`f32` of the float).
"""

from __future__ import annotations

import struct

from ..errors import check_choice, check_float, check_int

H3_SHIFT = 12.0                 # MiniMaxH3.sampling_settings["shift"]
TIMESTEPS = 1000                # ModelSamplingDiscreteFlow's table length (and its multiplier)
SCHEDULERS = ("simple",)        # the shipped workflows' BasicScheduler scheduler
MAX_STEPS = 10000               # BasicScheduler's steps maximum


def f32(x: float) -> float:
    """`x` rounded to the nearest float32, as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def time_snr_shift(alpha: float, t: float) -> float:
    """comfy.model_sampling.time_snr_shift in Python floats (float64)."""
    if alpha == 1.0:
        return t
    return alpha * t / (1 + (alpha - 1) * t)


def _time_snr_shift_f32(alpha: float, t: float) -> float:
    if alpha == 1.0:
        return t
    return f32(f32(alpha * t) / f32(1 + f32((alpha - 1) * t)))


def table_sigma(i: int, shift: float = H3_SHIFT) -> float:
    """Entry i - 1 (i = 1..1000) of ModelSamplingDiscreteFlow's float32 sigma table."""
    timestep = f32(f32(i / TIMESTEPS) * TIMESTEPS)           # (arange(1, 1001) / 1000) * multiplier
    return _time_snr_shift_f32(f32(shift), f32(timestep / TIMESTEPS))   # sigma(timestep): timestep / multiplier


def percent_to_sigma(percent: float, shift: float = H3_SHIFT) -> float:
    """ModelSamplingDiscreteFlow.percent_to_sigma: the sigma at `percent` of the schedule, in Python floats."""
    if percent <= 0.0:
        return 1.0
    if percent >= 1.0:
        return 0.0
    return time_snr_shift(shift, 1.0 - percent)


def schedule_sigmas(steps: int, scheduler: str = "simple", shift: float = H3_SHIFT) -> tuple[float, ...]:
    """The `steps` + 1 sigmas BasicScheduler gives at denoise 1 (the last is 0), each a float32 value."""
    check_int("steps", steps, 1, MAX_STEPS, "Give the sampler's step count.")
    check_choice("scheduler", scheduler, SCHEDULERS, "The shipped workflows use BasicScheduler's simple scheduler.")
    check_float("shift", shift, 0.0, 100.0, f"H3's model sampling uses shift {H3_SHIFT:g}.")
    per_step = TIMESTEPS / steps
    return tuple(table_sigma(TIMESTEPS - int(x * per_step), shift) for x in range(steps)) + (0.0,)
