"""Every input limit of a LongMedia job, in one place (the nodes' schemas, the CLI and the core read these).

Numbers only: the checks live beside the facts they need (`h3.lattice.check_lattice_frames` for the
17k+5 frame grid, `errors.check_int` / `check_float` for ranges).
"""

from .units import GIB

MIN_SECONDS = 0.04                  # one frame at 24 fps
MAX_SECONDS = 3600.0                # one hour of assembled video
FPS = 24                            # H3's native frame rate (also h3.lattice.FPS)
MAX_FRAMES = int(MAX_SECONDS) * FPS  # 86400 requested frames (snapped up to <= 86416)
MAX_EDGE_PX = 16384                 # video canvas and reference pictures, per edge
MAX_SOL_MIN_TOKENS = 1 << 22          # Sol's sol_min_tokens: sequences shorter than this run exact
MAX_TEXT_TOKENS = 32768             # Qwen tokens of the prompt
MAX_SEED = 2 ** 64 - 1              # ComfyUI's seed range (RandomNoise); pass seeds wrap around inside it
# Later passes of a segmented job: ComfyUI's noise path adds 1 to the seed it is given in two places
# (k-diffusion's CPU default_noise_sampler for ancestral / SDE samplers, H3's condition-audio noise) and
# torch.manual_seed takes at most 2**64 - 1, so derived pass seeds wrap below MAX_SEED.
MAX_PASS_SEED = MAX_SEED - 1
MAX_JOB_LATENT_BYTES = 32 * GIB  # the whole job's float32 AV latent lives in RAM (three copies during a run)
# Packed rows per pass. H3's longest stock pass at 1344x768 (3609 frames) has 1,082,527 rows before text; at
# 2**20 rows one model call is ~10^18 FLOPs of attention alone, and no 8-24 GB card fits it. Longer jobs run
# in segments.
MAX_PASS_ROWS = 1 << 20
MAX_SP_DEGREE = 8                   # sequence-parallel ranks (GPUs or CPU processes) of one pass
MAX_LINK_GBPS = 10000.0             # a declared rank-to-rank link, GB/s
MAX_MB = 1 << 20                    # megabyte inputs (guards, the activation reserve)
