"""tools/input_sweep's judge, without a server: how a reply or a history entry is classified, and which files count
as partial, stray, lost, stale or written outside output/."""

from __future__ import annotations

from tools.input_sweep.outcome import Result, check_files, classify_history, classify_validation

CLEAR = ("segment_seeds[0]='²' is not allowed: expected a whole number from 0 or `auto`. Type one seed or `auto` "
         "per segment, e.g. `auto, auto, 1234`.")


def _error(node_type: str, exception_type: str, message: str, trace: str = "") -> dict:
    return {"status": {"status_str": "error", "messages": [["execution_start", {}], ["execution_error", {
        "node_id": "30", "node_type": node_type, "exception_type": exception_type, "exception_message": message,
        "traceback": [trace]}]]}}


def _classified(entry: dict) -> Result:
    result = Result("case", "cat", "")
    classify_history(result, entry)
    return result


def test_history_outcomes():
    assert _classified({"status": {"status_str": "success"}}).outcome == "ran"
    assert _classified(_error("LongMediaSampler", "LongMedia input error", CLEAR)).outcome == "refused_clear"
    assert _classified(_error("LongMediaSampler", "LongMedia input error", "x" * 601)).outcome == "unclear"
    assert _classified(_error("LongMediaSampler", "KeyError", "'samples'")).outcome == "unclear"
    raw = _classified(_error("LongMediaHiRes", "ComfyUI-LongMedia.longmedia.attention.schedule.SolSettingsError", "nan"))
    assert raw.outcome == "unclear" and raw.node == "30 (LongMediaHiRes)"
    stock = _classified(_error("SamplerCustomAdvanced", "RuntimeError", "shape", 'File "/c/comfy/samplers.py"'))
    assert stock.outcome == "refused_by_comfyui"
    through_pack = _error("SamplerCustomAdvanced", "RuntimeError", "shape", 'File "/x/ComfyUI-LongMedia/longmedia/a.py"')
    assert _classified(through_pack).outcome == "unclear"


def test_validation_outcomes():
    def judged(ctype: str, kind: str, details: str = "") -> str:
        result = Result("case", "cat", "")
        classify_validation(result, {"error": {"type": "prompt_outputs_failed_validation"}, "node_errors": {
            "12": {"class_type": ctype, "errors": [{"type": kind, "message": "m", "details": details}]}}})
        return result.outcome

    assert judged("LongMediaSetup", "value_bigger_than_max") == "refused_by_comfyui"
    assert judged("LongMediaSetup", "custom_validation_failed", "family='x' is not allowed") == "refused_clear"
    assert judged("LongMediaSetup", "custom_validation_failed", "y" * 700) == "unclear"
    assert judged("LongMediaSetup", "exception_during_validation") == "unclear"
    assert judged("LongMediaSampler", "exception_during_inner_validation") == "refused_by_comfyui"   # a link
    result = Result("case", "cat", "refused")
    classify_validation(result, {"error": {"type": "invalid_prompt", "message": "no outputs"}})
    assert result.outcome == "refused_by_comfyui" and not result.surprise


def test_files_a_case_leaves():
    before = {"base/output/old.mp4": (10, 1), "base/server.log": (1, 1)}
    after = {**before, "base/server.log": (2, 5),                                  # the log grows: fine
             "base/output/sweep/ok_00001_.mp4": (100, 50),                         # reported, fresh
             "base/output/sweep/.hidden_00001_.mp4": (100, 50),                    # reported: the user's dot name
             "base/output/sweep/x.mp4.partial": (5, 50), "base/output/.tmp_ab12.mp4": (5, 50),
             "base/output/stray.txt": (1, 50), "base/temp/preview.png": (1, 50),
             "base/temp/longmedia_retakes/k/seg.pt": (9, 50),                      # the retake store: expected
             "base/user/default/comfy.settings.json": (1, 50), "base/x": (1, 50), "outside/abs_00001_.mp4": (1, 50)}
    result = Result("case", "cat", "")
    own = check_files(result, before, after, ["sweep/ok_00001_.mp4", "sweep/.hidden_00001_.mp4", "gone.mp4",
                                              "old.mp4"], started_ns=10)
    assert result.problems == {
        "lost": ["gone.mp4"], "stale": ["old.mp4"],
        "partial": ["base/output/sweep/x.mp4.partial", "base/output/.tmp_ab12.mp4"],
        "stray": ["base/output/stray.txt", "base/temp/preview.png"],
        "outside": ["base/x", "outside/abs_00001_.mp4"]}
    assert {str(p) for p in own} >= {"base/output/sweep/ok_00001_.mp4", "base/output/stray.txt"}
