"""Issue 29's speed figures from card-bench rows: each LongMedia row's steady step as a ratio to stock's
device-timed step, Sol's first step against its steady step, and scheduled_sol averaged over a 20-step schedule.

    python3 -m bench.schedule_average OUT/cards.jsonl [MORE.jsonl ...] [--steps 20]

scheduled_sol's default schedule (SolSettings) runs its first `dense_percent` of the steps exact and the rest as Sol,
with tau moving from tau_start (1.3) to tau_end (0.8) along the curve over the step index. A step's cost is flat
within a phase, apart from tau: the dense steps cost the exact steady step (the `longmedia` row: the same plan and
exact backend on the same card), and a Sol step at tau costs the Sol steady step interpolated linearly in tau
between the `longmedia_sol` row (tau 1.3) and the `longmedia_sol_tau08` row (tau 0.8). Each of those rows runs 2-3
steps. Steady = the mean of the device-timed steps after the first. Where a `longmedia_scheduled_sol` row ran
(3 steps: dense, then Sol at tau 1.15 and 0.8), a second estimate takes the Sol cost from its own later steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from longmedia.attention.schedule import SolSettings, tau_at

GOALS = {"exact": 0.62, "sol": 0.20, "sol_first_over_steady": 1.3, "scheduled_sol": 0.40}


def schedule_taus(steps: int, settings: SolSettings | None = None) -> tuple[float | None, ...]:
    """tau of each step of a `steps`-step schedule (None = exact), as scheduled_sol runs it: progress = i / (steps-1);
    settings None = scheduled_sol's defaults."""
    settings = SolSettings() if settings is None else settings
    n = max(1, steps - 1)
    return tuple(tau_at(i / n, settings) for i in range(steps))


def sol_cost(tau: float, at: dict[float, float]) -> float:
    """Seconds of a Sol step at `tau`, linear in tau between the two measured taus (clamped outside them)."""
    (t0, s0), (t1, s1) = sorted(at.items())[0], sorted(at.items())[-1]
    if t1 == t0:
        return s0
    w = min(1.0, max(0.0, (tau - t0) / (t1 - t0)))
    return s0 + w * (s1 - s0)


def scheduled_average(exact_s: float, sol_at: dict[float, float], steps: int = 20,
                      settings: SolSettings | None = None) -> tuple[float, tuple[float, ...]]:
    """(mean seconds per step, each step's seconds) of scheduled_sol over `steps` steps."""
    per = tuple(exact_s if tau is None else sol_cost(tau, sol_at) for tau in schedule_taus(steps, settings))
    return sum(per) / len(per), per


def steady(row: dict) -> float | None:
    """Mean device-timed step after the first: bench.cards' `steps_s` holds steps 2..n, its first step is
    `first_step_s` (the row's s/step where it ran one step only)."""
    steps = row.get("steps_s") or []
    if steps:
        return sum(steps) / len(steps)
    return row.get("s_per_step")


def _row(rows: list[dict], sampler: str) -> dict | None:
    found = [r for r in rows if r.get("sampler") == sampler and r.get("result") == "ok" and not r.get("extra")]
    return found[-1] if found else None


def figures(rows: list[dict], steps: int = 20) -> list[str]:
    """The ratio lines, each marked met or missed against issue 29's goals (absent rows are named)."""
    stock = _row(rows, "stock")
    base = steady(stock) if stock else None
    if not base:
        return ["no ok stock row with a device-timed step: no ratios"]
    out = [f"stock: {base:.2f} s/step (device-timed, card {stock.get('card_gib')} GiB, steps {stock.get('steps_s')})"]

    def ratio(name: str, seconds: float, goal: float) -> str:
        r = seconds / base
        return f"{name}: {seconds:.2f} s/step = {r:.3f}x stock (goal <= {goal}x: {'met' if r <= goal else 'missed'})"
    exact, sol, sol08 = _row(rows, "longmedia"), _row(rows, "longmedia_sol"), _row(rows, "longmedia_sol_tau08")
    if exact:
        out.append(ratio(f"exact auto ({exact.get('card_gib')} GiB, {exact.get('attention_backend')})", steady(exact),
                         GOALS["exact"]))
    if sol:
        out.append(ratio("sol steady", steady(sol), GOALS["sol"]))
        first = sol.get("first_step_s")     # device-timed, from the sample node's start to step 1's end
        if first and sol.get("steps_s"):
            r = first / steady(sol)
            rep_first, rep_steady = sol.get("report_first_step_s"), sol.get("report_steady_step_s")
            rep = (f"; LongMedia's report (from the first model call): {rep_first:.2f} / {rep_steady:.2f} s = "
                   f"{rep_first / rep_steady:.2f}x" if rep_first and rep_steady else "")
            out.append(f"sol first step {first:.2f} s = {r:.2f}x its steady step (goal <= "
                       f"{GOALS['sol_first_over_steady']}x: {'met' if r <= GOALS['sol_first_over_steady'] else 'missed'})"
                       f"{rep}; kernels compiled before step 1 in {sol.get('warmup_s')} s"
                       + (f"; the attention speed timing ran before it in {sol['probe_s']:.2f} s"
                          if sol.get("probe_s") else ""))
    if exact and sol and sol08:
        avg, per = scheduled_average(steady(exact), {1.3: steady(sol), 0.8: steady(sol08)}, steps)
        out.append(ratio(f"scheduled_sol over {steps} steps (estimated from its phases: "
                         f"{sum(1 for t in schedule_taus(steps) if t is None)} dense)", avg, GOALS["scheduled_sol"]))
        out.append("  per step: " + ", ".join(f"{s:.1f}" for s in per))
    else:
        out.append("scheduled_sol: needs the longmedia, longmedia_sol and longmedia_sol_tau08 rows")
    own = _row(rows, "longmedia_scheduled_sol")
    sol_at = own_sol_steps(own) if own else {}
    if exact and sol_at:
        avg, per = scheduled_average(steady(exact), sol_at, steps)
        out.append(ratio(f"scheduled_sol over {steps} steps (from its own row's Sol steps at tau "
                         + ", ".join(f"{t:.2f}" for t in sorted(sol_at, reverse=True))
                         + ", clamped beyond them; dense steps at the exact row's)", avg, GOALS["scheduled_sol"]))
        out.append("  per step: " + ", ".join(f"{s:.1f}" for s in per))
    return out


def own_sol_steps(row: dict, settings: SolSettings | None = None) -> dict[float, float]:
    """{tau: device-timed seconds} of a `longmedia_scheduled_sol` row's Sol steps after its first, at the taus its own
    schedule of that many steps ran (its first step, dense and paying the fault-in, is not used)."""
    later = row.get("steps_s") or []
    taus = schedule_taus(len(later) + 1, settings)[1:]
    return {tau: sec for tau, sec in zip(taus, later) if tau is not None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.schedule_average", description=__doc__.splitlines()[0])
    p.add_argument("rows", type=Path, nargs="*", help="cards.jsonl files of bench.cards")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--smoke", action="store_true", help="the figures of made-up rows (no files, no GPU)")
    a = p.parse_args(argv)
    if a.smoke:
        rows = [{"sampler": name, "result": "ok", "card_gib": card, "steps_s": steps} for name, card, steps in (
            ("stock", 120, [58.1, 55.5]), ("longmedia", 16, [43.8, 37.9, 37.9]),
            ("longmedia_sol", 16, [23.2, 12.9, 12.8]), ("longmedia_sol_tau08", 16, [24.0, 14.5, 14.4]))]
    elif not a.rows:
        p.error("give cards.jsonl files, or --smoke")
    else:
        rows = [json.loads(line) for path in a.rows for line in path.read_text().splitlines() if line.strip()]
    print("\n".join(figures(rows, a.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
