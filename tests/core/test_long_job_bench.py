"""bench.long_job's CPU side: the 60 s job's plan and the device calls its --smoke prints, without ComfyUI."""

from __future__ import annotations

import json
from pathlib import Path

from bench.long_job import entry
from bench.long_job.job import FULL, SMOKE, job_plan
from bench.long_job.tables import table


def test_the_smoke_plans_the_issue_s_job_and_lists_the_calls(monkeypatch, capsys):
    monkeypatch.delenv("LONGMEDIA_COMFYUI_ROOT", raising=False)
    assert entry.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "1344x768, 60 s -> 1450 frames in 7 segments" in out and "50 blocks INT8 on a 16 GiB card" in out
    assert "1664x960" in out                                    # Hi-Res x1.25 on the /32 grid
    calls = [line.strip() for line in out.splitlines() if line.strip().startswith("python -m bench.long_job")]
    assert calls[0].startswith("python -m bench.long_job --stages sampler hires refiner decode --blocks 50")
    assert calls[1].startswith("python -m bench.long_job --prepare")
    assert [c.split("--passes ")[1].split(" --")[0] for c in calls if "--passes" in c] == ["0 3", "3 6", "6 7"] * 3
    assert calls[-1].startswith("python -m bench.long_job --stage decode")


def test_the_plan_has_every_stage_per_pass():
    plan = job_plan(FULL, 16, 128, 50)
    assert list(plan) == ["sampler", "hires", "refiner", "decode"] and all(r["fits"] for r in plan.values())
    assert plan["sampler"]["passes"] == plan["hires"]["passes"] == 7
    assert plan["hires"]["seq_len"] > plan["sampler"]["seq_len"]        # rows x ~1.25^2 per pass
    assert FULL.hires_schedule_steps == 2 and SMOKE.segments().count == 2
    json.dumps(plan)


def test_the_table_joins_pass_rows_stage_rows_and_seams():
    rows = [{"kind": "pass", "stage": "hires", "segment": s, "s_per_step": 90.0 + s, "process_peak_bytes": 15 << 30,
             "call_end_max": {"torch_reserved": 13 << 30}} for s in range(2)]
    rows.append({"kind": "stage", "stage": "hires", "passes": [0, 0], "result": "ok", "wall_s": 400.0,
                 "host_rss_peak_bytes": 30 << 30, "host_anon_peak_bytes": 3 << 30, "host_file_peak_bytes": 27 << 30,
                 "process_peak_bytes": 15 << 30,
                 "segments": [{"segment": 1, "seq_len": 121116, "memory_mode": "low_vram",
                               "predicted_peak_bytes": 14 << 30, "torch_peak_bytes": 12 << 30}],
                 "seams": {"video": [1.01], "audio": [0.93], "inside_video_max": 1.1, "inside_audio_max": 1.3}})
    text = table(rows, {"hires": {"ram_need_bytes": 24 << 30, "estimated_s": 3300.0}})
    assert "hires | 1 | 91.00 | 15.00 | 12.00 / 13.00 | 14.00 | 121116 | low_vram | 1.01 / 0.93" in text
    assert "hires | 0..end | ok | 400.00 | 15.00 | 30.00 / 3.00 / 27.00 | 24.00 | 3300.00 | 1.10 / 1.30 | - |" in text
    rows[-1].update(host_ram_gib=32.0, mem_available_min_bytes=3 << 30, pinned_peak_bytes=20 << 30,
                    disk_read_per_call_bytes=5 << 30)
    assert "| 1.10 / 1.30 | 32 GiB | 3.00 | 20.00 | 5.00" in table(rows)
    rows[-1]["host_ram_gib"] = None
    assert "| 1.10 / 1.30 | all | 3.00 |" in table(rows)


def test_a_host_ram_limit_plans_for_that_ram_balloons_and_reaches_every_stage(monkeypatch, tmp_path):
    """--host-ram-gb 32: the plan is a 32 GiB machine's, the checkpoint's cache is dropped, the balloon runs for
    the stages and is ended after them, and each stage process gets the balloon's row."""
    import bench.cards.entry as cards_entry
    import bench.cards.host_balloon as host_balloon
    import bench.disk_read as disk_read

    events = []

    class Proc:
        def __init__(self, name):
            self.name, self.returncode = name, None

        def kill(self):
            events.append(("kill", self.name))

        def wait(self):
            pass

        def poll(self):
            return None

    models = tmp_path / "models"
    models.mkdir()
    (models / "h3.safetensors").write_bytes(b"x")
    plans = []
    monkeypatch.setattr(entry, "_gpu_and_comfyui", lambda: True)
    monkeypatch.setattr(entry, "checkpoint", lambda a: "h3.safetensors")
    monkeypatch.setattr(entry, "print_plan", lambda a, job, checkpoint=None: plans.append(a.ram_gib) or {})
    monkeypatch.setattr(cards_entry, "_ballast", lambda card: Proc("ballast"))
    monkeypatch.setattr(disk_read, "drop_page_cache", lambda path: events.append(("drop", Path(path).name)))
    monkeypatch.setattr(host_balloon, "start_balloon", lambda gib, cwd: (
        events.append(("balloon", gib)) or Proc("balloon"),
        host_balloon.HostLimit(host_ram_gib=gib, host_ram_limit="balloon", balloon_bytes=7,
                               mem_available_start_bytes=32 << 30)))
    monkeypatch.setattr(entry, "run_stages", lambda a, unet: events.append(("stages", json.loads(a.host_row))) or 0)
    monkeypatch.setattr(entry, "table", lambda rows, plan=None: "")
    monkeypatch.setattr(entry, "read_rows", lambda path: [])
    assert entry.main(["--stages", "sampler", "--out", str(tmp_path), "--models", str(models),
                       "--host-ram-gb", "32"]) == 0
    assert plans == [32.0]
    assert [e[0] for e in events] == ["drop", "balloon", "stages", "kill", "kill"]
    assert events[2][1]["host_ram_gib"] == 32.0 and events[2][1]["mem_available_start_bytes"] == 32 << 30
    events.clear()
    assert entry.main(["--stages", "sampler", "--out", str(tmp_path), "--models", str(models)]) == 0
    assert [e[0] for e in events] == ["stages", "kill"] and events[0][1]["host_ram_gib"] is None


def test_stages_run_in_order_each_whole_and_the_first_failure_ends_the_run(monkeypatch, tmp_path):
    ran = []

    def fake_run_stage(a, unet):
        ran.append((a.stage, a.passes, unet))
        return 1 if a.stage == "refiner" else 0

    monkeypatch.setattr(entry, "run_stage", fake_run_stage)
    a = entry.parse(["--stages", "sampler", "hires", "refiner", "decode", "--out", str(tmp_path)])
    assert entry.run_stages(a, "h3.safetensors") == 1
    assert ran == [("sampler", None, "h3.safetensors"), ("hires", None, "h3.safetensors"),
                   ("refiner", None, "h3.safetensors")]
    ran.clear()
    a = entry.parse(["--stage", "hires", "--passes", "3", "6"])
    assert entry.run_stages(a, "u") == 0 and ran == [("hires", [3, 6], "u")]


def test_the_per_pass_peak_sampler_keeps_a_spike_between_resets_and_forgets_the_last_pass():
    from bench.long_job.record import PeakSampler

    values = iter([10, 5, 9, 2, 1, 3])
    meter = PeakSampler(lambda: {"host_anon_peak_bytes": next(values)}, interval_s=3600.0)   # the thread never wakes
    try:
        meter.reset()                        # a new pass: the 10 of the last one is gone
        meter._sample()                      # the thread's sample: the pass's spike, 9
        assert meter.peak() == {"host_anon_peak_bytes": 9}      # peak() reads 2 now, keeps 9
        meter.reset()
        assert meter.peak() == {"host_anon_peak_bytes": 3}
    finally:
        meter.close()


def test_host_split_reads_this_process_s_anonymous_and_file_pages():
    from bench.long_job.record import host_split

    split = host_split()
    assert split["host_anon_peak_bytes"] > 1 << 20 and split["host_file_peak_bytes"] > 1 << 20   # Python has both


def test_the_plan_counts_the_checkpoint_that_runs_not_the_preset(monkeypatch):
    """The GPU run's checkpoint keeps its adaLN projections bf16 (about 13 GiB over the INT8 preset at 50 blocks): a
    plan of the preset undercounts the weights that travel from host every model call (pinned, cached or read)."""
    from longmedia.h3.profiles import ModelProfile

    bigger = ModelProfile.preset("h3-bf16")
    seen = []
    monkeypatch.setattr(ModelProfile, "from_safetensors", classmethod(lambda cls, path: seen.append(path) or bigger))
    preset, own = job_plan(FULL, 16, 128, 50), job_plan(FULL, 16, 128, 50, "/models/h3.safetensors")
    assert seen == ["/models/h3.safetensors"] and own["sampler"]["model"]["weight_bytes"] == bigger.weight_bytes
    assert own["sampler"]["host_ram"]["weights_host_bytes"] - preset["sampler"]["host_ram"]["weights_host_bytes"] > 20 << 30


def test_the_table_of_kept_rows_reads_the_plan_kept_beside_them(capsys):
    """docs/lab/data keeps a run's rows as DATE-...jsonl and its plan as DATE-...-plan.json: --table joins them, so
    the plan's RAM beside the measured RSS reproduces from the command the docs give."""
    from pathlib import Path

    rows = Path(__file__).resolve().parents[2] / "docs/lab/data/2026-12-06-h100-long-job-60s.jsonl"
    assert entry.main(["--table", str(rows)]) == 0
    out = capsys.readouterr().out
    assert "sampler | 0..end | ok | 279.35 | 15.88 | 46.85 / 45.94 / 0.78 | 43.95 | 3027.62 |" in out


def test_the_decode_alone_writes_no_dit_checkpoint_and_the_dit_stages_do(monkeypatch, tmp_path):
    """The 44 GiB DiT checkpoint costs a minute of device time to write; the decode stage does not load it."""
    import bench.cards.entry as cards_entry

    class Ballast:
        def kill(self):
            pass

        def wait(self):
            pass

    written, ran = [], []
    monkeypatch.setattr(entry, "_gpu_and_comfyui", lambda: True)
    monkeypatch.setattr(entry, "checkpoint", lambda a: written.append(a.models) or "h3.safetensors")
    monkeypatch.setattr(entry, "print_plan", lambda a, job, checkpoint=None: {"checkpoint": checkpoint})
    monkeypatch.setattr(entry, "run_stages", lambda a, unet: ran.append(unet) or 0)
    monkeypatch.setattr(cards_entry, "_ballast", lambda card: Ballast())
    monkeypatch.setattr(entry, "table", lambda rows, plan=None: "")
    monkeypatch.setattr(entry, "read_rows", lambda path: [])
    models = tmp_path / "models"
    assert entry.main(["--stages", "decode", "--out", str(tmp_path), "--models", str(models)]) == 0
    assert written == [] and ran == [""]
    assert entry.main(["--stages", "refiner", "decode", "--out", str(tmp_path), "--models", str(models)]) == 0
    assert len(written) == 1 and ran[-1] == "h3.safetensors"
    # once the checkpoint is there, the decode's plan (which the chain's table reads) is the checkpoint's own
    from longmedia.testing.full_h3 import default_filename

    models.mkdir()
    (models / default_filename("int8", 50)).write_bytes(b"")
    assert entry.main(["--stages", "decode", "--out", str(tmp_path), "--models", str(models)]) == 0
    assert len(written) == 2 and ran[-1] == "h3.safetensors"


def test_sampler_steps_reach_the_plan_the_stage_process_and_its_sigmas(monkeypatch, tmp_path, capsys):
    """--sampler-steps 8 (the turbo schedule at cfg 1): the job the run plans and measures has the Sampler at 8 steps
    (Hi-Res and the Refiner keep theirs), the stage's own process is told so, and its BasicScheduler gets 8 steps."""
    import pytest

    from bench.cards import comfy_process
    from bench.long_job import stage
    from bench.long_job.job import bench_job

    a = entry.parse(["--stage", "sampler", "--sampler-steps", "8", "--out", str(tmp_path)])
    job = bench_job(False, a.sampler_steps)
    assert (job.sampler_steps, job.hires_steps, job.refiner_steps) == (8, FULL.hires_steps, FULL.refiner_steps)
    assert bench_job(False, None) is FULL and bench_job(True, None) is SMOKE
    seen = []
    monkeypatch.setattr(comfy_process, "child_env", lambda repo: {})
    monkeypatch.setattr(entry.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or type("P", (), {"returncode": 0}))
    assert entry.run_stage(a, "u") == 0
    child = entry.parse(seen[0][seen[0].index("--child"):])
    assert child.sampler_steps == 8 and child.child == "sampler"
    child.passes = [0, 0]
    assert stage.stage_prompt(child, stage.stage_job(child), "u")["sigmas"]["inputs"]["steps"] == 8
    for bad in ("0", "101", "eight"):
        with pytest.raises(SystemExit):
            entry.parse(["--sampler-steps", bad])
    assert "a step count from 1 to 100" in capsys.readouterr().err
