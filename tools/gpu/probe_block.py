"""The block stages of tools/gpu/probe_aimdo.py: one full-width MiniMax H3 DiTBlock resident on cuda (forward
timed with CUDA events), then the same weights behind ModelPatcherDynamic (the VBAR path) and what
model_management.free_memory releases."""
import time

from probe_memory import MiB, _err, mem, residency_summary

H3 = dict(hidden=5376, heads=56, head_dim=128, ffn=14336, t_dim=2688, eps=1e-5, qk_eps=1e-5)


def block_inputs(seq, device, dtype):
    import torch
    from comfy.ldm.minimax.model import rope_rotation_table
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(seq, H3["hidden"], device=device, dtype=dtype, generator=g)
    t_emb = torch.randn(1, H3["t_dim"], device=device, dtype=dtype, generator=g)
    # positions on a (t, h, w) grid, 16 inverse frequencies per axis -> [S, 96] angles, as MiniMaxH3Model.rope_freqs
    side = 32
    idx = torch.arange(seq, device=device)
    pos = torch.stack([idx // (side * side), (idx // side) % side, idx % side], dim=1).float()
    inv = 1.0 / (10000.0 ** (torch.arange(16, device=device, dtype=torch.float32) / 16))
    per_axis = pos.unsqueeze(-1) * inv.view(1, 1, -1)
    half = torch.cat(per_axis.unbind(dim=1), dim=-1)
    rope = rope_rotation_table(torch.cat((half, half), dim=-1), dtype)
    segments = [(0, seq, 0)]
    return x, t_emb, segments, rope


def time_forward(block, seq, device, dtype, iters=10, warmup=2):
    import torch
    x, t_emb, segs, rope = block_inputs(seq, device, dtype)
    with torch.inference_mode():
        for _ in range(warmup):
            y = block(x.clone(), t_emb, segs, rope)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        xs = [x.clone() for _ in range(iters)]
        start.record()
        for i in range(iters):
            y = block(xs[i], t_emb, segs, rope)
        end.record()
        torch.cuda.synchronize()
    ms = start.elapsed_time(end) / iters
    h, f, nh, hd = H3["hidden"], H3["ffn"], H3["heads"], H3["head_dim"]
    inner = nh * hd
    flops = 2 * seq * (h * 3 * inner + inner * h + h * 2 * f + f * h) + 4 * seq * seq * inner
    return {"seq": seq, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12,
            "out_finite": bool(torch.isfinite(y).all().item()), "out_std": float(y.float().std().item())}


def block_stage(mm, dev, seq, res):
    import comfy.ops
    import torch
    from comfy.ldm.minimax.model import DiTBlock
    dtype = torch.bfloat16
    import comfy.memory_management
    t0 = time.perf_counter()
    # with aimdo enabled, comfy.ops Linear layers are built lazily (weight None until a state dict
    # is loaded); build the resident reference block with that off, so its weights exist on cuda
    was = comfy.memory_management.aimdo_enabled
    comfy.memory_management.aimdo_enabled = False
    try:
        block = DiTBlock(H3["hidden"], H3["heads"], H3["head_dim"], H3["ffn"], H3["t_dim"], H3["eps"], H3["qk_eps"],
                         dtype=dtype, device=dev, operations=comfy.ops.disable_weight_init)
    finally:
        comfy.memory_management.aimdo_enabled = was
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02)
    block.requires_grad_(False)  # as model_base does; kitchen's in-place rope refuses tensors that need grad
    torch.cuda.synchronize()
    n_params = sum(p.numel() for p in block.parameters())
    res["block"] = {"params": n_params, "weight_mib": n_params * 2 / MiB, "build_s": time.perf_counter() - t0}
    mem("b1_block_resident", res["memory"])
    res["block"]["attention"] = getattr(__import__("comfy.ldm.modules.attention", fromlist=["x"]).optimized_attention,
                                        "__name__", "?")
    res["block"]["forward"] = [time_forward(block, n, dev, dtype) for n in seq]
    res["block"]["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MiB
    mem("b2_after_forward", res["memory"])
    return block


def dynamic_stage(mm, dev, block, seq, res):
    """The same weights on the CPU behind ModelPatcherDynamic: ComfyUI pages them into a VBAR on demand."""
    import comfy.model_patcher
    import comfy.ops
    import torch
    from comfy.ldm.minimax.model import DiTBlock
    dtype = torch.bfloat16
    out = {}
    res["dynamic"] = out
    # as ComfyUI builds a model for Dynamic VRAM: on the offload device, comfy.ops layers (lazy
    # Linear weights while aimdo is enabled), then load_state_dict fills them
    cpu_block = DiTBlock(H3["hidden"], H3["heads"], H3["head_dim"], H3["ffn"], H3["t_dim"], H3["eps"], H3["qk_eps"],
                         dtype=dtype, device="cpu", operations=comfy.ops.manual_cast)
    out["lazy_linear_weights"] = cpu_block.mlp.fc1.weight is None
    missing, unexpected = cpu_block.load_state_dict({k: v.to("cpu") for k, v in block.state_dict().items()}, strict=False)
    out["load_state_dict"] = {"missing": list(missing), "unexpected": list(unexpected)}
    cpu_block.requires_grad_(False)
    cpu_block.get_dtype = lambda: dtype
    del block
    torch.cuda.empty_cache()
    mem("d0_resident_block_dropped", res["memory"])
    patcher = comfy.model_patcher.CoreModelPatcher(cpu_block, load_device=dev, offload_device=torch.device("cpu"))
    out["patcher"] = type(patcher).__name__
    out["is_dynamic"] = bool(patcher.is_dynamic())
    t0 = time.perf_counter()
    mm.load_models_gpu([patcher])
    out["load_models_gpu_s"] = time.perf_counter() - t0
    out["loaded_size_mib_after_load"] = patcher.loaded_size() / MiB
    mem("d1_after_load_models_gpu", res["memory"])
    out["forward"] = time_forward(patcher.model, seq[0], dev, dtype, iters=5, warmup=1)
    out["loaded_size_mib_after_forward"] = patcher.loaded_size() / MiB
    try:
        import comfy_aimdo.model_vbar as model_vbar
        out["vbars_analyze_mib"] = model_vbar.vbars_analyze(dev.index) / MiB
        vbar = patcher._vbar_get()
        if vbar is not None:
            out["vbar_residency_after_forward"] = residency_summary(vbar)
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        out["vbar_query"] = _err(e)
    out["patcher_get_free_memory_mib"] = patcher.get_free_memory(dev) / MiB
    mem("d2_after_dynamic_forward", res["memory"])
    t0 = time.perf_counter()
    unloaded = mm.free_memory(1e30, dev)
    out["free_memory_unloaded"] = [type(m.model.model).__name__ if m.model is not None else None for m in unloaded]
    out["free_memory_s"] = time.perf_counter() - t0
    out["loaded_size_mib_after_free_memory"] = patcher.loaded_size() / MiB
    try:
        vbar = patcher._vbar_get()
        if vbar is not None:
            out["vbar_residency_after_free_memory"] = residency_summary(vbar)
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        out["vbar_query_after_free"] = _err(e)
    mm.soft_empty_cache()
    mem("d3_after_free_memory", res["memory"])
    out["ok"] = True
