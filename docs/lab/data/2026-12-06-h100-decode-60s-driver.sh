#!/bin/bash
# Fallback when the GPU time left cannot hold the whole chain: the 60 s job's decode and save alone, under the
# 16 GiB ballast, on a seeded random latent of the job's final size (1450 frames at 1664x960).
set -u
unset OUT
W=/tmp/longmedia_long_job; mkdir -p $W
echo "decode60: start $(date +%T)"
python3 -c "
import torch; from longmedia.h3 import lattice as L
f=1450; T=L.latent_frames(f); at=L.audio_latent_frames(L.seconds_for_frames(f)); g=torch.Generator().manual_seed(5)
torch.save({'output':[torch.randn(1,24,T,60,104,generator=g), torch.randn(1,32,2,at,generator=g)],'denoised':[],'passes_done':7}, '$W/refiner.pt'); print('latent T', T, 'audio', at)" || exit 1
for i in $(seq 1 60); do
    python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
    echo "decode60: waiting for PyAV ($i)"; sleep 5
done
python3 -m bench.long_job --stages decode --blocks 50 --out $W --stage-budget-s 600; rc=$?
python3 -m bench.long_job --table $W/long_job.jsonl > $W/long_job_table.md
ls -la $W/long_job 2>/dev/null
echo "decode60: end $(date +%T)"
exit $rc
