"""Input sweep (issue 49): bad and unusual API prompts against a real ComfyUI server, every outcome classified.

Run from the repository root (never in CI; about 90 s of prompts on two CPU cores, plus the server start)::

    OMP_NUM_THREADS=1 LONGMEDIA_COMFYUI_ROOT=/path/to/ComfyUI python -m tools.input_sweep [--only REGEX] [--list]
        [--json out.json] [--keep]

It starts one ComfyUI (`tests/comfyui/harness.py`: `--cpu`, 127.0.0.1, a temporary base directory with the tiny
random-weight H3 checkpoints and the test nodes), submits each case of `cases.py` (a shipped example made tiny by
`tests/comfyui/api_examples.py`, one input changed) and classifies it (`outcome.py`): refused_clear (LongMedia's
own input error, at most 600 characters), refused_by_comfyui (ComfyUI's own type/range/link check), ran, unclear
(a raw exception from inside the pack, or a longer message), crash (the server died, or the prompt hung past its
timeout; the server is restarted). After every case: the server answers, no `.partial` or stray file under output/
or temp/ (the retake store temp/longmedia_retakes/ aside), no output lost or stale, nothing written outside
output/, no worker process left. It prints a category x outcome table and writes every case's outcome as JSON;
the exit status is 1 when any case is unclear or a crash, leaves a problem, or surprises (a valid value refused,
an invalid one run).
"""
