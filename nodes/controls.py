"""The Sampler's memory and attention inputs, shared by Sampler, Hi-Res and Refiner (V3 schema pieces)."""

from __future__ import annotations

from comfy_api.latest import io

from ..longmedia.attention.schedule import CURVES, SINK_MODES, TAU_RANGE, SolSettings
from ..longmedia.limits import MAX_SOL_MIN_TOKENS
from ..longmedia.planning import types as PLAN_TYPES

AUTO = -1
SOL = SolSettings()  # the Sol inputs' defaults
MANUAL_HELP = {
    "mlp_chunk_tokens": "Rows per SwiGLU MLP chunk: smaller holds less of fc1's output at once.",
    "sol_qkv_chunk_tokens": "qkv_chunk_tokens (input sol_qkv_chunk_tokens; every streamed attention, not only "
                            "Sol): rows per K/V projection chunk and per query chunk.",
    "sol_out_proj_chunk_tokens": "out_proj_chunk_tokens (input sol_out_proj_chunk_tokens; every streamed "
                                 "attention): rows per out-projection call inside a query chunk.",
    "vram_activation_reserve_mb": "VRAM kept free beside the predicted peak (allocator slack, other models).",
    "inter_block_vram_guard_mb": "After a block, clean up when less than this many MB are free (streamed modes only).",
    "inter_block_guard_cooldown_blocks": "Blocks skipped after an inter-block clean-up (streamed modes only).",
    "inter_block_guard_emergency_mb": ("Below this many free MB, clean up whatever the cooldown says, releasing "
                                       "resident weight pages under dynamic VRAM if needed (streamed modes only; "
                                       "released weights cross through the cast buffers for the rest of the run, "
                                       "slower)."),
    "late_block_guard_start": ("From this block index on, keep the late-block target free (for the final layer; "
                               "streamed modes only)."),
    "late_block_guard_target_mb": ("Free MB the late-block guard keeps before the final layer: it empties torch's "
                                   "cache, then releases resident weight pages under dynamic VRAM (streamed modes "
                                   "only; released weights cross through the cast buffers for the rest of the run, "
                                   "slower)."),
    "step_boundary_cleanup_mb": ("At each sampler step boundary, clean up when less than this many MB are free: "
                                 "higher cleans up more often (against fragmentation)."),
}

# The qkv/out-proj chunk sizes serve every streamed attention, not only Sol: their labels drop the old prefix
# (the input names, which workflows and API prompts use, stay).
LABELS = {"sol_qkv_chunk_tokens": "qkv_chunk_tokens", "sol_out_proj_chunk_tokens": "out_proj_chunk_tokens"}

MEMORY_HELP = ("How the blocks run (one line per option):\n"
               "- auto (recommended): the least constrained mode whose predicted peak fits your card.\n"
               "- normal: stock block math, not quite stock's runtime: a step guard runs after each model call and block prefetch may be off (the plan's reasons say which).\n"
               "- low_vram: exact streamed attention and chunked MLP (about a third of the activations).\n"
               "- ultra_low_vram: streamed with K/V held for a group of heads at a time (last resort).")
ATTENTION_HELP = ("Which attention runs (one line per option):\n"
                  "- auto (recommended): keeps the attention you started ComfyUI with (--use-sage-attention, "
                  "--use-flash-attention, --use-ck-attention, ...) where it can run; with ComfyUI's default PyTorch "
                  "attention, the fastest exact attention that fits; Sol only when nothing exact fits.\n"
                  "- existing: keep ComfyUI's installed attention.\n"
                  "- sol: approximate block-sparse attention at a fixed tau.\n"
                  "- scheduled_sol: tau follows the sampler's progress (see the sol_* inputs).")
OUTPUT_HELP = {
    "output": "The sampled AV latent (video and audio), for LongMedia Decode & Save (or VAEDecode / VAEDecodeAudio) or the next LongMedia stage (Hi-Res, Refiner).",
    "denoised_output": "The model's denoised estimate at the last step (as SamplerCustomAdvanced's denoised_output).",
}


def memory_inputs() -> list:
    """memory_mode, attention_mode, the Sol schedule and the ten manual VRAM controls (-1 = auto).

    The advanced ones are optional so API prompts may leave them out: a missing value means its default.
    """
    inputs = [
        io.Combo.Input("memory_mode", options=list(PLAN_TYPES.MEMORY_MODES), default="auto", tooltip=MEMORY_HELP),
        io.Combo.Input("attention_mode", options=list(PLAN_TYPES.ATTENTION_MODES), default="auto",
                       tooltip=ATTENTION_HELP),
        io.Float.Input("sol_tau_start", default=SOL.tau_start, min=TAU_RANGE[0], max=TAU_RANGE[1], step=0.05, advanced=True, optional=True,
                       tooltip="Sol threshold at the start (sol uses only this). Lower keeps more key blocks exact; "
                               "-100 is exact dense attention."),
        io.Float.Input("sol_tau_end", default=SOL.tau_end, min=TAU_RANGE[0], max=TAU_RANGE[1], step=0.05, advanced=True, optional=True,
                       tooltip="Sol threshold at the end of the schedule (scheduled_sol)."),
        io.Combo.Input("sol_curve", options=list(CURVES),
                       default=SOL.curve, advanced=True, optional=True, tooltip="How tau moves from start to end over sigma progress."),
        io.Int.Input("sol_min_tokens", default=SOL.min_tokens, min=0, max=MAX_SOL_MIN_TOKENS, advanced=True, optional=True,
                     tooltip="Sequences shorter than this run exact attention (Sol gains little there)."),
        io.Float.Input("sol_dense_percent", default=SOL.dense_percent, min=0.0, max=1.0, step=0.05, advanced=True, optional=True,
                       tooltip="Leading fraction of the schedule that runs exact (scheduled_sol)."),
        io.Combo.Input("sol_sink_conditioning", options=list(SINK_MODES), default=SOL.sink_conditioning,
                       advanced=True, optional=True, tooltip="exact_kv: text/conditioning/reference/audio keys always exact; "
                                              "exact_kv_and_rows: their query rows too; off: route them like video."),
    ]
    for name, _low, high, zero_ok, fix in PLAN_TYPES.MANUAL_CONTROLS:
        inputs.append(io.Int.Input(name, display_name=LABELS.get(name), default=AUTO, min=AUTO, max=high,
                                   advanced=True, optional=True,
                                   tooltip=f"auto (-1): the planner decides. {MANUAL_HELP.get(name, name)} "
                                           + ("0 = stock path for that phase of the block. " if zero_ok else "") + fix))
    return inputs


def latent_outputs() -> list:
    """output and denoised_output, with their tooltips (Sampler, Hi-Res and Refiner)."""
    return [io.Latent.Output(display_name=name, tooltip=help) for name, help in OUTPUT_HELP.items()]


def plan_request(kwargs: dict):
    """The node's widget values as a PlanRequest (-1 -> None = auto) with its Sol settings."""
    manual = {name: (None if kwargs.get(name, AUTO) == AUTO else kwargs[name]) for name in PLAN_TYPES.MANUAL_FIELDS}
    sol = SolSettings(**{name: kwargs.get(f"sol_{name}", getattr(SOL, name)) for name in SOL.__dataclass_fields__})
    return PLAN_TYPES.PlanRequest(memory_mode=kwargs.get("memory_mode", "auto"),
                                  attention_mode=kwargs.get("attention_mode", "auto"), sol=sol, **manual)
