"""A long job at full depth, stage by stage, under a real card limit (issue 28, deliver 5).

On the lent GPU machine, after tools/gpu/bootstrap.sh:

    python -m bench.long_job --smoke                  # CPU dry run: the 60 s job's plan (and, with ComfyUI, every
                                                      # stage on the tiny checkpoint at 64x64)
    python -m bench.long_job --out /tmp/long_job      # the GPU table (about 35 min over four stage processes)
    python -m bench.long_job --stages hires refiner --out /tmp/long_job   # resume: stages whose input latent is saved

The job: 60 s at 1344x768 (1450 frames), segment_seconds 10 with 22 context frames (7 segments), on a full-width
random-weight H3 with `--blocks` DiT blocks (50: full depth), INT8, through ComfyUI's PromptExecutor with Dynamic
VRAM, while a ballast process (bench.cards' ballast) holds all device memory but `--card` GiB (16). Each stage
runs in its own process (`stage.py`), reading the previous stage's latent from OUT and saving its own there:

    sampler   Setup -> LongMedia Sampler on the job (2 steps per pass)
    hires     Hi-Res x1.25 on the job (1 step per pass: BasicScheduler 2 steps, denoise 0.5)
    refiner   Refiner on the job (1 step per pass, denoise 0.25), audio kept
    decode    LongMedia Decode & Save with ComfyUI's own H3 video and audio VAEs at full size, random weights

Rows go to OUT/long_job.jsonl as they happen (one per segment as its pass ends, one per stage at its end); the
table (`tables.py`, also `--table OUT/long_job.jsonl`) has per segment: s/step (device-timed: CUDA events around
each model call, bench/cards/step_clock.py's marks), the process peak (NVML, per pass and per stage), the plan's
predicted peak, the seam at the join before the segment (`longmedia.segments.seam_steps`), and per stage the
host RSS peak against the whole-job plan's RAM for that stage (`longmedia.planning.whole_job`).

Modules: `entry` (arguments, the parent: checkpoint, ballast, one process per stage), `job` (the job, its plan),
`stage` (one stage's process), `nodes` (the bench's stage nodes), `record` (per-pass device timing and peaks),
`tables`.
"""
