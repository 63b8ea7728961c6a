#!/bin/bash
# decode probe: full-size H3 VAEs (random weights) on a seeded latent of the 60 s job's final width/height, 43 latent frames
W=/tmp/dprobe; mkdir -p $W
python3 -c "
import torch; g=torch.Generator().manual_seed(5); T=43; f=(T-1)*4+1; at=round(f/24*40)
torch.save({'output':[torch.randn(1,24,T,60,104,generator=g), torch.randn(1,32,2,at,generator=g)],'denoised':[],'passes_done':7}, '$W/refiner.pt'); print('latent T', T, 'frames', f, 'audio', at)"
for i in $(seq 1 60); do
    python3 -c "import av, sys; sys.exit(1 if getattr(av, 'LONGMEDIA_STUB', False) else 0)" && break
    echo "waiting for PyAV ($i)"; sleep 3
done
nvidia-smi --query-gpu=name --format=csv,noheader
# as run on the device (the -P child needs ComfyUI and the repository on its path):
PYTHONPATH=$LONGMEDIA_COMFYUI_ROOT:$PWD:$PYTHONPATH timeout 200 python3 -P -m bench.long_job --child decode --passes 0 0 --out $W --models /tmp --blocks 50 --card 16 --unet none 2>&1 | grep -v "WARNING:root"
ls -la $W/long_job
