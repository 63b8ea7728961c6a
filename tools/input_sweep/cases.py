"""The sweep's cases: bad or unusual API prompts, as a careful user and a hostile client would send them.

Each case is one of the host prompts (`prompts`) with one thing changed. `expect` is "ran" where the value is valid
(however odd) and the prompt must complete, "refused" where it must not, "" where either is fine as long as a
refusal is clear. Categories follow issue 49's defect list, then the general cases: every widget input of every
LongMedia node out of range and of the wrong type, generated from the schema snapshot.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.comfyui.api_examples import node_id

from .prompts import MISSING, one_pass, second_setup, set_input, stages, story

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "tests" / "data" / "longmedia_object_info.json"
MAX_SEED = 2 ** 64 - 1
RUN_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Case:
    """One prompt of the sweep. `outside`: paths (relative to the sweep's work folder) a wrong refusal would write."""

    name: str
    category: str
    prompt: dict = field(repr=False)
    expect: str = ""
    timeout_s: float = RUN_TIMEOUT_S
    outside: tuple[str, ...] = ()
    key: str = ""    # node.input=value: a second case with the same key is dropped


def _tag(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60]


def _case(category: str, label: str, build, ctype: str, name: str, value, expect: str = "", **kw) -> Case:
    tag = _tag(f"{category}_{name}_{label}")
    return Case(f"{ctype}.{name}: {label}", category, set_input(build(tag), ctype, name, value), expect,
                key=f"{ctype}.{name}={value!r}"[:300], **kw)


# --- issue 49's defects, each with variants ------------------------------------------------------------------------

def seeds_cases() -> list[Case]:
    """The Sampler's `segment_seeds` on the three-segment story (with Retakes)."""
    values = [
        ("superscript two", "\u00b2", "refused"), ("arabic-indic digits", "\u0661\u0662", "refused"), ("fullwidth 7", "\uff17", "refused"),
        ("2**64-1 on segment 0", str(MAX_SEED), "refused"), ("2**64-1 on segment 2", f"auto, auto, {MAX_SEED}", "refused"),
        ("21 digits", "1" * 21, "refused"),
        ("1 MB of digits", "7" * 1_000_000, "refused"), ("4300 digits", "9" * 4300, "refused"),
        ("negative", "-1", "refused"), ("negative after auto", "auto, -5", "refused"),
        ("spaces around", "  7   8  ", "ran"), ("leading comma", ",7", ""), ("trailing comma", "7,", ""),
        ("double comma", "7,,8", ""), ("too many entries", "1, 2, 3, 4", "refused"),
        ("100 entries", ", ".join(["auto"] * 100), "refused"), ("float", "7.5", "refused"), ("hex", "0x10", "refused"),
        ("AUTO uppercase", "AUTO, Auto, auto", "ran"), ("a word", "seven", "refused"),
        ("semicolons", "1;2;3", "refused"), ("newlines", "1\n2\n3", "ran"), ("NUL", "7\x00", "refused"),
        ("largest seed on segment 2", f"auto, auto, {MAX_SEED - 1}", ""),
    ]
    out = [_case("segment_seeds", label, story, "LongMediaSampler", "segment_seeds", v, e) for label, v, e in values]
    for label, value in (("int 5", 5), ("list of ints", [1, 2, 3]), ("None", None), 
                         ("bool true", True), ("link-like list", ["23", 0])):
        out.append(_case("segment_seeds", label, story, "LongMediaSampler", "segment_seeds", value))
    out.append(_case("segment_seeds", "one pass, one seed", one_pass, "LongMediaSampler", "segment_seeds", "9", "ran"))
    out.append(_case("segment_seeds", "one pass, two seeds", one_pass, "LongMediaSampler", "segment_seeds", "9, 10",
                     "refused"))
    return out


def _prompt_only(tag: str) -> dict:
    """The story with no segment_prompts: every segment encodes Setup's own `prompt` through its text encoder."""
    return set_input(story(tag), "LongMediaSetup", "segment_prompts", "")


def segment_prompt_cases() -> list[Case]:
    """Setup's `segment_prompts` (and `prompt`) on the story's three segments."""
    values = [
        ("400,000-character line", "a" * 400_000, "refused"), ("400,000 characters of words", "fox " * 100_000, "refused"),
        ("empty lines only", "\n\n\n", ""), ("empty lines between", "a fox\n\n\nthe fox runs\n\n", "ran"),
        ("one line", "a fox", "ran"),
        ("four lines for three segments", "a\nb\nc\nd", "refused"),
        ("schedule", "0s: a fox\n2s: it runs\n3.2s: it sleeps", "ran"),
        ("two times in segment 0", "0s: a fox\n1.5s: it runs", "refused"), ("0s: alone", "0s:", "refused"),
        ("out of order", "2s: b\n0s: a", "refused"),
        ("duplicate time", "0s: a\n0s: b", "refused"), ("beyond the clip", "0s: a\n99s: b", "refused"),
        ("just past the end", "0s: a\n3.8s: b", "refused"), ("negative time", "-1s: a", "refused"),
        ("mixed timed and untimed", "0s: a\nb", "refused"), ("minutes form", "00:01: a", "refused"),
        ("huge time", "1e9s: a", ""),
        ("two times in one segment", "0s: a\n0.1s: b", "refused"), ("late first time", "2s: only later", ""),
        ("emoji", "\U0001f98a \U0001f332", "ran"), ("NUL inside", "a fox\x00b\nc\nd", ""),
        ("CRLF lines", "a\r\nb\r\nc", "ran"),
    ]
    out = [_case("segment_prompts", label, story, "LongMediaSetup", "segment_prompts", v, e) for label, v, e in values]
    for label, value in (("int 5", 5), ("list of strings", ["a", "b", "c"]), ("None", None)):
        out.append(_case("segment_prompts", label, story, "LongMediaSetup", "segment_prompts", value))
    # the one-pass Setup's own prompt text, through its text encoder
    for label, value, expect in (("400,000 characters", "b" * 400_000, "refused"), ("NUL", "a\x00b", ""),
                                 ("emoji", "\U0001f98a", "ran")):
        out.append(_case("segment_prompts", label, _prompt_only, "LongMediaSetup", "prompt", value, expect))
    out.append(_case("segment_prompts", "one-pass job with three lines", one_pass, "LongMediaSetup", "segment_prompts",
                     "a\nb\nc", ""))
    return out


def retakes_cases() -> list[Case]:
    out = []
    for label, value in (("x", "x"), ("5", 5), ("a list", [1, 2, 3]), ("None", None), ("object", {"ram_mb": 1}),
                         ("a link to the job", ["12", 3]), ("true", True)):
        out.append(_case("retakes", label, story, "LongMediaSampler", "retakes", value,
                         "ran" if value is None else "refused"))
    for name, lo, hi in (("ram_mb", 0, 1_048_576), ("disk_mb", 0, 1_048_576)):
        for label, value, expect in (("-1", -1, "refused"), ("max+1", hi + 1, "refused"), ("2**64", 2 ** 64, "refused"),
                                     ("zero", lo, "ran"), ("max", hi, "ran"), ("1.5", 1.5, ""),
                                     ("NaN", math.nan, "refused")):
            out.append(_case("retakes", label, story, "LongMediaRetakes", name, value, expect))
    return out


def devices_cases() -> list[Case]:
    values = [
        ("cuda:7", "cuda:7", "refused"), ("2", "2", "refused"), ("-1", "-1", "refused"), ("cuda:0", "cuda:0", "refused"),
        ("gpu:0,gpu:1", "gpu:0,gpu:1", "refused"), ("gpu:0", "gpu:0", "refused"), ("garbage", "garbage!", "refused"),
        ("cpu alone", "cpu", "ran"), ("cpu,cuda:0", "cpu,cuda:0", "refused"),
        ("cpu;cpu", "cpu;cpu", "refused"), ("trailing comma", "cpu,", "ran"), ("17 cpus", ",".join(["cpu"] * 17), "refused"),
        ("100,000 characters", "c" * 100_000, "refused"), ("mps,mps", "mps,mps", "refused"),
        ("default", "default", "ran"), ("cpu:0,cpu:1", "cpu:0,cpu:1", ""), ("spaces", "  ", "ran"),
    ]
    out = [_case("devices", label, one_pass, "LongMediaSampler", "devices", v, e) for label, v, e in values]
    for label, value in (("int 2", 2), ("None", None), ("list", ["cpu", "cpu"])):
        out.append(_case("devices", label, one_pass, "LongMediaSampler", "devices", value))
    out.append(_case("devices", "cpu,cpu (two ranks)", one_pass, "LongMediaSampler", "devices", "cpu,cpu", "ran",
                     timeout_s=400.0))
    return out


def filename_cases(workdir: Path) -> list[Case]:
    """Decode & Save's `filename_prefix` and its numbers, on the one-pass job."""
    def dec(tag: str) -> dict:
        return one_pass(tag, decode=True)

    absolute = workdir / "outside" / "abs"
    values = [
        ("NUL", "sweep/a\x00b", "refused", ()), ("absolute path", str(absolute), "refused", ("outside",)),
        ("../x", "../x", "refused", ()), ("../../x", "../../x", "refused", ()),
        ("video/../../x", "video/../../x", "refused", ()), ("240 characters", "sweep/" + "a" * 234, "ran", ()),
        ("300 characters", "sweep/" + "b" * 294, "refused", ()), ("4200 characters", "c" * 4200, "refused", ()),
        ("empty", "", "", ()), ("folder only", "sweep/", "", ()),
        ("deep folders", "sweep/a/b/c/d/e", "ran", ()),
        ("newline", "sweep/x\ny", "", ()), ("date tokens", "sweep/%date:yyyy-MM-dd%_x", "ran", ()),
        ("unicode", "sweep/\u00e9\u2713\U0001f98a", "ran", ()), ("hidden name", "sweep/.hidden", "", ()),
        ("dot", ".", "", ()), ("240-character folder", "sweep/" + "d" * 240 + "/x", "", ()),
    ]
    out = [_case("filename_prefix", label, dec, "LongMediaDecodeSave", "filename_prefix", v, e, outside=o)
           for label, v, e, o in values]
    for label, value in (("int 5", 5), ("None", None)):
        out.append(_case("filename_prefix", label, dec, "LongMediaDecodeSave", "filename_prefix", value))
    for name, values2 in (("fps", ((0, "refused"), (121, "refused"), (1, "ran"), (120, "ran"), (math.nan, "refused"),
                                   ("abc", "refused"))),
                          ("crf", ((-2, "refused"), (52, "refused"), (0, "ran"), (51, "ran"))),
                          ("bit_depth", ((9, ""), (12, "refused"), (7, "refused"), (10, "ran")))):
        for value, expect in values2:
            out.append(_case("decode_numbers", repr(value), dec, "LongMediaDecodeSave", name, value, expect))
    return out


def _stage_pair(tag: str, stage: str, **setup_b) -> dict:
    """stages() with `stage` given a second Setup's job (same length) while its latent comes from the first."""
    prompt = stages(tag)
    other = second_setup(prompt, **setup_b)
    prompt[node_id(prompt, stage)]["inputs"]["job"] = [other, 3]
    return prompt


def job_cases() -> list[Case]:
    """Hi-Res, the Refiner and the Sampler given another Setup's job, or a latent of another length or canvas."""
    out = []
    for stage in ("LongMediaHiRes", "LongMediaRefiner", "LongMediaSampler"):
        for label, setup_b, expect in (
                ("other segments, same length", {"segment_seconds": 1.5}, "refused"),
                ("other context, same length", {"context_frames": 39}, "refused"),
                ("one-pass job, same length", {"segment_seconds": 0.0}, ""),   # the job decides: one pass
                ("other length", {"seconds": 3.0}, "refused"),
                ("other canvas", {"width": 96}, ""),   # the latent's canvas counts (Hi-Res changes it)
                ("same settings, other Setup", {}, "")):
            if stage == "LongMediaSampler" and label in ("other canvas", "same settings, other Setup"):
                continue   # the Sampler's latent is Setup's empty canvas: these say nothing new there
            tag = _tag(f"job_{stage}_{label}")
            out.append(Case(f"{stage}.job={label}", "jobs", _stage_pair(tag, stage, **setup_b), expect))

    def latent_from(tag: str, stage: str, width: int = 64, height: int = 64, length: int = 48) -> dict:
        prompt = stages(tag)
        prompt["empty"] = {"class_type": "EmptyMiniMaxH3LatentAV",
                           "inputs": {"width": width, "height": height, "length": length}}
        prompt[node_id(prompt, stage)]["inputs"]["latent"] = ["empty", 0]
        return prompt

    for stage in ("LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner"):
        for label, kw, expect in (("latent of another length", {"length": 73}, "refused"),
                                  ("latent of another canvas", {"width": 96}, "")):
            tag = _tag(f"latent_{stage}_{label}")
            out.append(Case(f"{stage}.latent={label}", "jobs", latent_from(tag, stage, **kw), expect))

    def sd_latent(tag: str, stage: str) -> dict:
        prompt = stages(tag, decode=stage == "LongMediaDecodeSave")
        prompt["sd"] = {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}
        prompt[node_id(prompt, stage)]["inputs"]["latent"] = ["sd", 0]
        return prompt

    for stage in ("LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner", "LongMediaDecodeSave"):
        out.append(Case(f"{stage}.latent=an SD image latent", "jobs", sd_latent(_tag(f"sd_{stage}"), stage), "refused"))

    def no_job(tag: str, stage: str) -> dict:
        prompt = stages(tag)
        del prompt[node_id(prompt, stage)]["inputs"]["job"]
        return prompt

    for stage in ("LongMediaHiRes", "LongMediaRefiner"):   # a segmented latent without its job: one pass, or a refusal
        out.append(Case(f"{stage}.job=not connected", "jobs", no_job(_tag(f"nojob_{stage}"), stage), ""))
    return out


# --- the earlier general cases -------------------------------------------------------------------------------------

def setup_cases() -> list[Case]:
    values = [
        ("width", "80 (off the grid)", 80, "refused"), ("width", "64.5", 64.5, ""),
        ("width", "32 (min)", 32, "ran"), ("height", "48 (off the grid)", 48, "refused"),
        ("height", "16384 (max)", 16384, ""), ("seconds", "0", 0, "refused"), ("seconds", "0.04 (min)", 0.04, "ran"),
        ("seconds", "-1", -1.0, "refused"), ("seconds", "1e308", 1e308, "refused"), ("seconds", "-inf", -math.inf, "refused"),
        ("segment_seconds", "0.04", 0.04, "refused"), ("segment_seconds", "longer than the job", 5.0, ""),
        ("segment_seconds", "equal to the job", 0.9, ""), ("context_frames", "23 (off the step)", 23, ""),
        ("context_frames", "39", 39, ""), ("context_frames", "0", 0, "refused"),
        ("family", "unknown", "t2v", "refused"), 
        ("family", "empty", "", "refused"), ("family", "int", 5, "refused"),
        ("family", "fl2va without frames", "fl2va", ""), ("family", "ref2va without references", "ref2va", ""),
        ("negative", "missing", MISSING, ""), ("positive", "missing (no clip either)", MISSING, "refused"),
    ]
    return [_case("setup", label, one_pass, "LongMediaSetup", name, v, e) for name, label, v, e in values]


def link_cases() -> list[Case]:
    """Missing links, links to the wrong output or type, links to nodes that are not there."""
    out = []
    for stage, name in (("LongMediaSampler", "guider"), ("LongMediaSampler", "noise"), ("LongMediaSampler", "latent"),
                        ("LongMediaSampler", "sigmas"), ("LongMediaHiRes", "sigmas"),
                        ("LongMediaHiRes", "latent")):
        out.append(_case("links", f"{name} missing", stages, stage, name, MISSING, "refused"))
    for stage, name, link, label in (
            ("LongMediaSampler", "latent", ["12", 0], "conditioning into latent"),
            ("LongMediaSampler", "job", ["12", 2], "latent into job"),
            ("LongMediaSampler", "retakes", ["12", 3], "job into retakes"),
            ("LongMediaSampler", "latent", ["12", 9], "output index past the end"),
            ("LongMediaSampler", "latent", ["nope", 0], "a node that is not there"),
            ("LongMediaHiRes", "latent", ["30", 2], "report string into latent"),
            ("LongMediaRefiner", "job", ["30", 0], "latent into job")):
        out.append(_case("links", label, stages, stage, name, link, "refused"))

    def decode_missing(tag: str, name: str) -> dict:
        prompt = one_pass(tag, decode=True)
        del prompt["decode"]["inputs"][name]
        return prompt

    for name, expect in (("video_vae", "refused"), ("audio_vae", ""), ("latent", "refused")):
        out.append(Case(f"LongMediaDecodeSave.{name}=missing", "links", decode_missing(_tag(f"dmiss_{name}"), name),
                        expect))
    swapped = one_pass("links_vaes_swapped", decode=True)
    swapped["decode"]["inputs"].update(video_vae=["avae", 0], audio_vae=["dvae", 0])
    out.append(Case("LongMediaDecodeSave.video_vae=the audio VAE", "links", swapped, "refused"))
    return out


def _schema() -> dict:
    return json.loads(SCHEMA.read_text())


WIDGETS = ("INT", "FLOAT", "STRING", "BOOLEAN")
HOSTS = {"LongMediaSetup": one_pass, "LongMediaSampler": one_pass, "LongMediaHiRes": stages,
         "LongMediaRefiner": stages, "LongMediaRetakes": story}
CONTROLS_ONLY_ON = "LongMediaSampler"   # the memory/attention controls Hi-Res and the Refiner share: swept once


def schema_cases() -> list[Case]:
    """Every widget input of every LongMedia node: below its min, above its max, the wrong type, NaN and +-inf for
    floats, an unknown combo value. Decode & Save's are in `filename_cases`; the shared controls once (Sampler)."""
    schema, out = _schema(), []
    sampler_inputs = {**schema[CONTROLS_ONLY_ON]["input"]["required"], **schema[CONTROLS_ONLY_ON]["input"]["optional"]}
    for node, host in HOSTS.items():
        inputs = {**schema[node]["input"]["required"], **schema[node]["input"].get("optional", {})}
        for name, spec in inputs.items():
            kind, opts = spec[0], (spec[1] if len(spec) > 1 else {})
            if node != CONTROLS_ONLY_ON and name in sampler_inputs and node in ("LongMediaHiRes", "LongMediaRefiner"):
                continue
            if name in ("segment_seeds", "devices", "segment_prompts", "family"):
                continue   # their own categories
            values: list[tuple[str, object]] = []
            control = node == CONTROLS_ONLY_ON and name not in ("noise", "guider", "sampler", "sigmas", "latent")
            if kind in ("INT", "FLOAT"):
                lo, hi = opts.get("min"), opts.get("max")
                if lo is not None and not (control and kind == "FLOAT"):
                    values.append(("min-1", lo - 1))
                if hi is not None and not (control and kind == "INT"):
                    values.append(("max+1", hi + 1))
                if not control:
                    values.append(("a word", "abc"))
                if kind == "FLOAT":   # NaN passes ComfyUI's range check (no comparison with NaN is true)
                    values += [("NaN", math.nan), ("inf", math.inf)]
            elif kind == "STRING":
                values += [("int", 5), ("empty", "")]
            elif kind == "BOOLEAN":
                values += [("a word", "yes"), ("2", 2)]
            elif kind == "COMBO" or isinstance(kind, list):
                values += [("unknown", "no_such_option")] + ([] if control else [("int", 3)])
            else:
                continue   # a link input: `link_cases`
            for label, value in values:
                out.append(_case(f"schema:{node.removeprefix('LongMedia')}", label, host, node, name,
                                 value))
    return out


def valid_unusual_cases() -> list[Case]:
    """Valid values at the edges: each must run."""
    values = [
        (one_pass, "LongMediaSampler", "memory_mode", "low_vram"), (one_pass, "LongMediaSampler", "attention_mode", "existing"),
        (one_pass, "LongMediaSampler", "sol_dense_percent", 1.0), (one_pass, "LongMediaSampler", "sol_dense_percent", 0.0),
        (one_pass, "LongMediaSampler", "mlp_chunk_tokens", 64), (one_pass, "LongMediaSampler", "sol_min_tokens", 0),
        (stages, "LongMediaHiRes", "scale", 1.0), (stages, "LongMediaHiRes", "scale", 2.0),
        (stages, "LongMediaHiRes", "keep_audio", False), (stages, "LongMediaHiRes", "renoise_sigma", 0.9),
        (stages, "LongMediaRefiner", "steps", 1), (stages, "LongMediaRefiner", "denoise", 1.0),
        (stages, "LongMediaRefiner", "denoise", 0.01), (stages, "LongMediaHiRes", "denoise", 1.0),
        (one_pass, "LongMediaSetup", "context_frames", 5), (one_pass, "LongMediaSetup", "width", 128),
    ]
    return [_case("valid_unusual", repr(value), build, ctype, name, value, "ran")
            for build, ctype, name, value in values]


def all_cases(workdir: Path) -> list[Case]:
    cases = [*seeds_cases(), *segment_prompt_cases(), *retakes_cases(), *devices_cases(), *filename_cases(workdir),
             *job_cases(), *setup_cases(), *link_cases(), *schema_cases(), *valid_unusual_cases()]
    seen: set[str] = set()
    unique = []
    for case in cases:
        if not case.key or case.key not in seen:
            unique.append(case)
        seen.add(case.key)
    cases = unique
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"two cases share a name: {duplicates}")
    return cases
