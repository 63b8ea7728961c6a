"""The executor's diagnostics seam (execution/probes.py): none by default, observers see every phase, the NaN
probe names the first non-finite phase, the weight probe counts origins, LONGMEDIA_PROBES picks them."""

import secrets

import pytest
import torch
from test_final_layer import FinalLayer

from longmedia.comfy.diagnostics_env import ENV_VAR, probes_from_env
from longmedia.comfy.patching.weight_origin import held_weight_origin, reported
from longmedia.errors import LongMediaInputError
from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.final_layer import chunked_final_forward
from longmedia.execution.probes import FiniteProbe, Observers, Quiet, WeightOriginProbe, probe_names, probes_named
from longmedia.execution.streamed_block import run_block
from longmedia.h3.dims import H3Dims
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes

DIMS = H3Dims(hidden=64, heads=4, head_dim=32, ffn=128, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)


def _block(seed: int, seq_len: int = 97):
    g = torch.Generator().manual_seed(seed)
    block = ReferenceBlock(DIMS, dtype=torch.float32).randomize_(g)
    return block, *make_block_inputs(DIMS, seq_len, dtype=torch.float32, generator=g)


class Recorder(Quiet):
    def __init__(self):
        self.events = []

    def phase_in(self, phase, x):
        self.events.append(("in", phase, x.shape[0]))

    def phase_out(self, phase, x, *outputs):
        self.events.append(("out", phase, len(outputs)))


class Poison(Quiet):
    """A test-only observer that writes NaN into the packed sequence after one phase (a broken kernel's effect)."""

    def __init__(self, phase):
        self.phase = phase

    def phase_out(self, phase, x, *outputs):
        if phase == self.phase:
            x[0, 0] = float("nan")


@pytest.mark.parametrize("chunks,names", [(ChunkSizes(), ("stock_attention", "stock_mlp")),
                                          (ChunkSizes(31, 0, 17), ("streamed_attention", "streamed_mlp"))])
def test_an_observer_sees_each_stage_and_changes_nothing(chunks, names):
    seed = secrets.randbelow(2 ** 31)
    block, x, t_emb, rows, rope = _block(seed)
    plain = run_block(block, x.clone(), t_emb, rows, rope, chunks=chunks)
    seen = Recorder()
    watched = run_block(block, x.clone(), t_emb, rows, rope, chunks=chunks, observer=Observers((seen, FiniteProbe())))
    assert torch.equal(plain, watched), seed
    assert seen.events == [("in", names[0], 97), ("out", names[0], 0), ("in", names[1], 97), ("out", names[1], 0)]


def test_the_nan_probe_names_the_first_non_finite_stage_and_then_goes_quiet():
    seed = secrets.randbelow(2 ** 31)
    block, x, t_emb, rows, rope = _block(seed)
    said: list[str] = []
    probe = FiniteProbe(say=said.append)
    chunks = ChunkSizes(31, 0, 17)
    run_block(block, x.clone(), t_emb, rows, rope, chunks=chunks, observer=probe)
    assert said == [] and probe.lines() == ("NAN PROBE: 2 phase calls checked, non-finite seen: False",)
    for _ in range(2):  # the poison comes before the probe: the probe sees the phase's output with NaN in it
        run_block(block, x.clone(), t_emb, rows, rope, chunks=chunks,
                  observer=Observers((Poison("streamed_mlp"), probe)))
    assert len(said) == 1 and said[0].startswith(
        "NAN PROBE: phase streamed_mlp call 4: input finite True, output finite False, finite max |x| ")
    assert probe.lines() == (said[0], "NAN PROBE: 4 phase calls checked, non-finite seen: True")


def test_the_nan_probe_checks_the_final_layer_apart():
    g = torch.Generator().manual_seed(secrets.randbelow(2 ** 31))
    layer = FinalLayer(dtype=torch.float32)
    x, t_emb = torch.randn(120, 64, generator=g), torch.randn(3, 24, generator=g)
    probe = FiniteProbe()
    forward = chunked_final_forward(layer, 16, observer=probe)
    forward(x, t_emb, (40, 120, 0), (0, 40, 2))
    assert probe.final_calls == 1 and probe.final_finding is None
    x[50, 3] = float("inf")  # a video row: video goes non-finite, audio stays finite
    forward(x, t_emb, (40, 120, 0), (0, 40, 2))
    assert probe.final_finding == "NAN PROBE: final layer call 2: input finite False, video False, audio True"
    assert probe.calls == 0 and probe.lines()[0] == probe.final_finding  # block phases are counted apart


def test_the_weight_probe_counts_origins_and_two_cast_buffer_weights_on_one_stream():
    said: list[str] = []
    probe = WeightOriginProbe(say=said.append)
    fc1, fc2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)
    stream, other = object(), object()
    vbar = (None, None, (stream, "faulted", None))
    buffer, elsewhere = (None, None, (stream, None, None)), (None, None, (other, None, None))
    assert [held_weight_origin(s) for s in ((None, None, None), vbar, buffer)] == ["resident", "vbar", "cast_buffer"]
    with reported(probe, fc1, (None, None, None)), reported(probe, fc2, vbar):
        pass
    with reported(probe, fc1, buffer), reported(probe, fc2, elsewhere):  # two streams: no sharing
        pass
    assert probe.counts["shared_stream"] == 0 and said == []
    with reported(probe, fc1, buffer), reported(probe, fc2, buffer):
        pass
    assert probe.counts == {"resident": 1, "vbar": 1, "cast_buffer": 4, "shared_stream": 1}
    assert said == ["WEIGHT PROBE: two held cast-buffer weights on one offload stream (Linear (4, 8))"]
    assert probe.lines() == (f"WEIGHT PROBE: {probe.counts}",)


def test_the_env_var_names_the_probes_and_none_is_the_default():
    assert probes_from_env({}) is None and probes_from_env({ENV_VAR: " "}) is None
    both = probes_from_env({ENV_VAR: "nan, weights"})
    assert [type(m) for m in both.members] == [FiniteProbe, WeightOriginProbe]
    assert probe_names("all") == ("nan", "weights")
    assert [type(m) for m in probes_named(("weights",)).members] == [WeightOriginProbe]
    with pytest.raises(LongMediaInputError, match=r"^LONGMEDIA_PROBES='nan,sync'.*Remove sync"):
        probes_from_env({ENV_VAR: "nan,sync"})

