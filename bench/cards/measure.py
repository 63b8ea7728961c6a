"""The card bench's measurement of one finished prompt: what the PromptExecutor, the bench sink and LongMedia's
report say, as the row's fields."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time

from .checks import segment_summary


def measure(executor, server, steps_at, memory, torch, mm, t0, clock=None) -> dict:
    """A finished prompt's row fields: time, torch and process peaks, the loaded model's residency, the result
    (ok, non-finite output, OOM, error, interrupted), step times, the sink's stats and the LongMedia report's plan
    and peaks. `steps_at`: the progress hook's CPU times; `clock`: the device-timed `StepClock` (step times come
    from it where given: the CPU's clock runs ahead of queued kernels); `memory`: the NVML sampler; `t0`: when the
    prompt started."""
    out: dict = {"total_s": time.perf_counter() - t0, "torch_peak_bytes": int(torch.cuda.max_memory_allocated())}
    peak = memory.peak()
    out.update(process_peak_bytes=peak["process_bytes"], device_used_peak_bytes=peak["device_used_bytes"],
               process_source=peak["process_source"])
    loaded = [(type(lm.model.model).__name__, int(lm.model.model_size()), int(lm.model.loaded_size()))
              for lm in mm.current_loaded_models if lm.model is not None]
    if loaded:
        name, size, resident = max(loaded, key=lambda t: t[1])
        out.update(model_class=name, model_bytes=size, resident_bytes=resident, moved_per_step_bytes=size - resident)
    if not executor.success:
        out["steps_done"] = len(steps_at)
        if any(ev == "execution_interrupted" for ev, _ in executor.status_messages):  # ComfyUI's Cancel
            out.update(result="interrupted")
            return out
        err = next((d for ev, d in executor.status_messages if ev == "execution_error"), {})
        text = f"{err.get('exception_type', '?')}: {err.get('exception_message', '')}"
        oom = "out of memory" in text.lower() or "OOM" in text or "OutOfMemory" in text
        out.update(result="OOM" if oom else "error", error=text[:600])
        advice = getattr(getattr(executor, "last_error", None), "suggestion", None)  # LongMediaInputError's, typed
        if advice is not None:
            out["suggestion"] = dataclasses.asdict(advice)
        if oom:  # the whole OOM report (the extras read its phase and advice)
            out["error_full"] = text[:4000]
        return out
    started = next((t for t, ev, d in server.events if ev == "executing" and d.get("node") == "sample"), None)
    if clock is not None and clock.steps_done:
        out.update(clock.times().fields())
    elif steps_at:  # no device clock (CPU dry runs): the CPU's view, labelled as such
        out["step_clock"] = "cpu"
        out["first_step_s"] = steps_at[0] - started if started else None
        diffs = [b - a for a, b in itertools.pairwise(steps_at)]
        out["s_per_step"] = sorted(diffs)[len(diffs) // 2] if diffs else out["first_step_s"]
    ui = executor.history_result.get("outputs", {}).get("sink", {})
    out["stats"] = (ui.get("stats") or [None])[0]
    out["result"] = output_result(out["stats"])
    report = (ui.get("report") or [""])[0]
    if report:
        rep = json.loads(report)
        plan = rep.get("plan", {})
        mem = plan.get("memory", {})
        out.update(memory_mode=plan.get("memory_mode"), attention_backend=rep.get("attention_backend"),
                   chunks=plan.get("chunks"), seq_len=(plan.get("geometry") or {}).get("seq_len"),
                   predicted_block_bytes=(mem.get("blocks_phase_bytes", 0) - mem.get("min_weight_bytes", 0)),
                   measured_block_bytes=max(rep.get("block_peak_bytes") or [0]) or None,
                   # torch's count only (the plan's outside-torch bytes are compared with the process below)
                   predicted_step_bytes=(mem.get("torch_need_bytes", mem.get("activation_need_bytes", 0))
                                         - mem.get("min_weight_bytes", 0)),
                   predicted_outside_torch_bytes=mem.get("outside_torch_bytes"),
                   measured_step_bytes=max([s.get("peak_bytes", 0) for s in rep.get("steps") or []] or [0]) or None,
                   predicted_peak_bytes=plan.get("predicted_peak_bytes"),
                   planned_streamed_bytes=mem.get("streamed_weight_bytes"),
                   plan_json=json.dumps(plan, sort_keys=True), boundaries=rep.get("boundaries"),
                   guard_events=rep.get("guard_events"),
                   report_steps=rep.get("steps"),
                   # LongMedia's own split (model-call time; kernel compilation before step 1 apart)
                   report_first_step_s=rep.get("first_step_s"), report_steady_step_s=rep.get("steady_step_s"),
                   warmup_s=rep.get("warmup_s"), probe_s=rep.get("probe_s"), skipped_steps=rep.get("skipped_steps"))
        if rep.get("host_ram") is not None:  # the report's host section, as LongMedia wrote it
            out["report_host_ram"] = rep["host_ram"]
        if rep.get("segments"):  # a segmented job: one summary per pass
            out.update(segments=segment_summary(rep), step_time_ratio=rep.get("step_time_ratio"))
    return out


def output_result(stats: dict | None) -> str:
    """A completed prompt's result: "ok", or "non-finite output" when the sink saw NaN or inf in the latent (such a
    row does not count as completed)."""
    return "non-finite output" if stats is not None and not stats.get("finite", True) else "ok"


def executor_class(execution):
    """ComfyUI's PromptExecutor keeping the exception a failed prompt raised (`last_error`), which its status
    messages only carry as text: `measure` reads a refusal's typed suggestion from it."""

    class BenchExecutor(execution.PromptExecutor):
        last_error: BaseException | None = None

        def handle_execution_error(self, prompt_id, prompt, current_outputs, executed, error, ex):
            self.last_error = ex
            return super().handle_execution_error(prompt_id, prompt, current_outputs, executed, error, ex)

    return BenchExecutor
