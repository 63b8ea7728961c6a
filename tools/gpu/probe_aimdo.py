"""Probe: does comfy-aimdo (ComfyUI's Dynamic VRAM) work on this GPU machine, through ComfyUI too?

Run on a GPU machine without network, after tools/gpu/bootstrap.sh:

    . tools/gpu/bootstrap.sh || exit 1
    PYTHONPATH=$LONGMEDIA_COMFYUI_ROOT:$PYTHONPATH python3 tools/gpu/probe_aimdo.py [--seq 2048,8192] [--no-dynamic] [-- <ComfyUI args>]

Stages (each one's result or exact error goes into the JSON summary printed last, and to
$OUT/probe_aimdo.json when $OUT is set):

  standalone  a subprocess (so a CUDA fault there cannot take this process down) that uses
              comfy-aimdo alone: control.init -> torch CUDA context -> control.init_devices,
              a 1 GiB VRAMBuffer (reserve, grow, write/read through comfy_aimdo.torch),
              and a ModelVBAR: alloc, fault (pin), residency, unpin, free_memory, re-fault.
  comfy       this process, in main.py's order: comfy.options/cli_args, comfy_aimdo.control.init
              (before torch is imported), import comfy.model_management, init_devices for
              get_all_torch_devices(), CoreModelPatcher = ModelPatcherDynamic,
              memory_management.aimdo_enabled = True; then a 1 GiB VRAMBuffer again.
  imports     comfy.sd, nodes, execution, comfy_extras.nodes_custom_sampler,
              comfy_extras.nodes_minimax_h3, comfy.ldm.minimax.model, server;
              comfy.ops.CastBiasWeightContext; comfy-kitchen backends.
  block       one full-width MiniMax H3 DiTBlock (hidden 5376, 56 x 128 heads, ffn 14336) in
              bf16 on cuda, weights resident, forward on each --seq token count, timed with CUDA events.
  dynamic     the same block held on the CPU behind ModelPatcherDynamic, loaded through
              comfy.model_management.load_models_gpu (the VBAR path), forward timed, then
              model_management.free_memory(1e30, dev) and what it released.
Memory is read before/after each stage from torch.cuda.mem_get_info and NVML (device used,
and this process's own usage where NVML lists it).
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

from probe_block import block_stage, dynamic_stage
from probe_memory import MiB, _err, mem, residency_summary

GiB = 1024 ** 3

# ---------------------------------------------------------------- standalone (subprocess)

def standalone():
    res = {"memory": {}}
    mem("0_start", res["memory"])
    import comfy_aimdo
    import comfy_aimdo.control as control
    res["aimdo_version"] = getattr(comfy_aimdo, "__version__", None) or _dist_version("comfy-aimdo")
    # init before torch is imported, as main.py does
    res["init"] = control.init(simple_vram_headroom=None, nvml_pressure=True)
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    mem("1_torch_context", res["memory"])
    res["init_devices"] = control.init_devices([(0, 0)])
    res["devctxs"] = len(control.devctxs)
    mem("2_init_devices", res["memory"])
    import comfy_aimdo.model_vbar as model_vbar
    import comfy_aimdo.torch as aimdo_torch
    import comfy_aimdo.vram_buffer as vram_buffer

    # 1 GiB VRAMBuffer: reserve, then grow to 1 GiB, write/read it as a torch tensor
    try:
        buf = vram_buffer.VRAMBuffer(1 * GiB, 0)
        mem("3_vrambuf_reserved", res["memory"])
        alloc = buf.get(1 * GiB)
        t = aimdo_torch.aimdo_to_tensor(alloc, torch.device("cuda", 0))
        t.fill_(7)
        torch.cuda.synchronize()
        res["vrambuffer"] = {"ok": True, "size_mib": buf.size() / MiB, "tensor_numel": t.numel(),
                             "checksum_ok": bool(int(t[:: 4096].sum().item()) == 7 * t[:: 4096].numel()),
                             "base_addr": hex(buf.base_addr)}
        mem("4_vrambuf_1GiB_grown", res["memory"])
        del t, alloc, buf
        torch.cuda.synchronize()
        mem("5_vrambuf_destroyed", res["memory"])
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        res["vrambuffer"] = _err(e)

    # ModelVBAR: the per-model virtual address range Dynamic VRAM pages weights into
    try:
        vb = {}
        t = None
        vbar = model_vbar.ModelVBAR(4 * GiB, 0)
        vbar.prioritize()
        a = vbar.alloc(512 * MiB)
        vb["after_alloc"] = residency_summary(vbar)
        sig = model_vbar.vbar_fault(a)
        vb["fault_ok"] = sig is not None
        if sig is not None:
            t = aimdo_torch.aimdo_to_tensor(a, torch.device("cuda", 0))
            t.fill_(3)
            torch.cuda.synchronize()
        vb["after_fault"] = residency_summary(vbar)
        vb["vbars_analyze_mib_after_fault"] = model_vbar.vbars_analyze(0) / MiB
        mem("6_vbar_512MiB_faulted", res["memory"])
        model_vbar.vbar_unpin(a)
        vb["after_unpin"] = residency_summary(vbar)
        vb["vbars_analyze_mib_after_unpin"] = model_vbar.vbars_analyze(0) / MiB
        freed = vbar.free_memory(256 * MiB)
        vb["free_memory_256MiB_returned_mib"] = freed / MiB
        vb["after_free_memory"] = residency_summary(vbar)
        mem("7_vbar_free_memory_256MiB", res["memory"])
        sig2 = model_vbar.vbar_fault(a)
        vb["refault_ok"] = sig2 is not None
        vb["refault_signature_same"] = model_vbar.vbar_signature_compare(sig, sig2)
        if sig2 is not None:
            t2 = aimdo_torch.aimdo_to_tensor(a, torch.device("cuda", 0))
            head = t2[:1 * MiB:4096].float().mean().item()
            tail = t2[-1 * MiB::4096].float().mean().item()
            vb["refault_first_MiB_mean"] = head   # 3.0 where the page kept its data
            vb["refault_last_MiB_mean"] = tail
            del t2
        model_vbar.vbar_unpin(a)
        vb["after_refault_unpin"] = residency_summary(vbar)
        del t, a, vbar  # the alloc tuple holds the ModelVBAR; its __del__ calls vbar_free
        torch.cuda.synchronize()
        mem("8_vbar_freed", res["memory"])
        vb["ok"] = True
        res["vbar"] = vb
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        res["vbar"] = _err(e)
    return res


def _dist_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001  named: the probe records every failure as data and goes on
        return None


# ---------------------------------------------------------------- ComfyUI, in-process

def comfy_stage(comfy_args, res):
    root = os.environ.get("LONGMEDIA_COMFYUI_ROOT")
    if not root:
        raise RuntimeError("LONGMEDIA_COMFYUI_ROOT is not set (source tools/gpu/bootstrap.sh)")
    found = importlib.util.find_spec("comfy")
    if found is None or os.path.realpath(os.path.join(root, "comfy")) not in [
            os.path.realpath(w) for w in (found.submodule_search_locations or ())]:
        raise RuntimeError(f"`comfy` is not imported from {root}: run PYTHONPATH=$LONGMEDIA_COMFYUI_ROOT:$PYTHONPATH "
                           "python3 tools/gpu/probe_aimdo.py")
    sys.argv = [os.path.join(root, "main.py")] + list(comfy_args)
    t0 = time.perf_counter()
    import comfy.options
    comfy.options.enable_args_parsing()
    from comfy.cli_args import args, enables_dynamic_vram
    res["comfy_args"] = comfy_args
    res["enables_dynamic_vram"] = enables_dynamic_vram()
    res["torch_imported_before_init"] = "torch" in sys.modules

    import comfy_aimdo.control
    if enables_dynamic_vram():  # main.py, verbatim protocol
        simple_vram_headroom = None if args.reserve_vram is None else int(args.reserve_vram * GiB)
        try:
            res["aimdo_init"] = comfy_aimdo.control.init(simple_vram_headroom=simple_vram_headroom,
                                                         nvml_pressure=not args.disable_nvml_pressure)
        except TypeError:
            try:
                res["aimdo_init"] = comfy_aimdo.control.init(simple_vram_headroom=simple_vram_headroom)
            except TypeError:
                res["aimdo_init"] = comfy_aimdo.control.init()
    mem("c1_after_aimdo_init", res["memory"])
    # main.py (as __main__) then imports cuda_malloc, which picks torch's cudaMallocAsync backend
    # (PYTORCH_CUDA_ALLOC_CONF) for +cu130 builds unless --disable-cuda-malloc, before torch loads
    import cuda_malloc  # noqa: F401
    res["PYTORCH_CUDA_ALLOC_CONF"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")

    import comfy.memory_management
    import comfy.model_management as mm
    import comfy.model_patcher
    res["import_model_management_s"] = time.perf_counter() - t0
    mem("c2_after_import_model_management", res["memory"])

    def dynamic_vram_supported():
        if mm.is_nvidia():
            return True
        if mm.is_amd():
            return mm.rocm_version >= (7, 14)
        return False

    res["dynamic_vram_supported"] = dynamic_vram_supported()
    if args.enable_dynamic_vram or (enables_dynamic_vram() and dynamic_vram_supported()):
        if (not args.enable_dynamic_vram) and (mm.torch_version_numeric < (2, 8)):
            res["aimdo_init_devices"] = "skipped: torch < 2.8"
        else:
            try:
                ok = comfy_aimdo.control.init_devices((d.index, int(args.vram_headroom * GiB))
                                                      for d in mm.get_all_torch_devices())
            except TypeError:
                ok = comfy_aimdo.control.init_devices(d.index for d in mm.get_all_torch_devices())
            res["aimdo_init_devices"] = ok
            if ok:
                comfy_aimdo.control.set_log_info()
                comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
                comfy.memory_management.aimdo_enabled = True
    res["aimdo_enabled"] = bool(comfy.memory_management.aimdo_enabled)
    dev = mm.get_torch_device()
    res["device"] = str(dev)
    res["device_name"] = mm.get_torch_device_name(dev)
    res["vram_state"] = str(mm.vram_state)
    res["total_memory_mib"] = mm.get_total_memory(dev) / MiB
    res["free_memory_mib"] = mm.get_free_memory(dev) / MiB
    res["torch_version_numeric"] = list(mm.torch_version_numeric)
    mem("c3_after_init_devices", res["memory"])

    # 1 GiB VRAMBuffer the ComfyUI way (model_management imports comfy_aimdo.vram_buffer after init)
    try:
        import comfy_aimdo.torch
        import comfy_aimdo.vram_buffer
        import torch
        buf = comfy_aimdo.vram_buffer.VRAMBuffer(1 * GiB, dev.index)
        t = comfy_aimdo.torch.aimdo_to_tensor(buf.get(1 * GiB), dev)
        t.fill_(1)
        torch.cuda.synchronize()
        res["vrambuffer_1GiB"] = {"ok": True, "size_mib": buf.size() / MiB, "numel": t.numel()}
        mem("c4_vrambuffer_1GiB", res["memory"])
        del t, buf
        torch.cuda.synchronize()
        mem("c5_vrambuffer_freed", res["memory"])
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        res["vrambuffer_1GiB"] = _err(e)
    return mm, dev


def imports_stage(res):
    import importlib
    out = {}
    for name in ("comfy.sd", "nodes", "execution", "comfy_extras.nodes_custom_sampler",
                 "comfy_extras.nodes_minimax_h3", "comfy.ldm.minimax.model", "server"):
        t0 = time.perf_counter()
        try:
            importlib.import_module(name)
            out[name] = {"ok": True, "s": round(time.perf_counter() - t0, 2)}
        except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
            out[name] = _err(e)
    res["imports"] = out
    import comfy.ops
    res["CastBiasWeightContext"] = hasattr(comfy.ops, "CastBiasWeightContext")
    try:
        import comfy_kitchen as ck
        from comfy_kitchen.backends import cuda as ckcuda
        backends = {}
        for k, v in ck.list_backends().items():
            v = dict(v) if isinstance(v, dict) else {"repr": str(v)}
            caps = v.pop("capabilities", None) or []
            v["has_rms_rope_split_half_"] = "rms_rope_split_half_" in caps
            v["n_capabilities"] = len(caps)
            backends[k] = v
        res["kitchen"] = {"backends": backends,
                          "cuda_ext_available": bool(getattr(ckcuda, "_EXT_AVAILABLE", False))}
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        res["kitchen"] = _err(e)
    try:
        import av
        res["av_is_stub"] = bool(getattr(av, "LONGMEDIA_STUB", False))
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        res["av_is_stub"] = f"{type(e).__name__}: {e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--standalone", action="store_true", help="(internal) the comfy-aimdo-only stage")
    ap.add_argument("--seq", default="2048,8192", help="comma-separated token counts for the block forward")
    ap.add_argument("--no-dynamic", action="store_true")
    ap.add_argument("comfy_args", nargs="*", help="ComfyUI CLI args, after --")
    a = ap.parse_args()
    a.seq = [int(n) for n in str(a.seq).split(",") if n]

    if a.standalone:
        try:
            r = standalone()
        except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
            r = _err(e)
        print("STANDALONE_JSON " + json.dumps(r))
        return

    import faulthandler
    faulthandler.enable()
    t_start = time.perf_counter()
    summary = {"pid": os.getpid(), "memory": {}}
    out_dir = os.environ.get("OUT")

    def checkpoint(label):
        # a hard crash (CUDA fault, segfault) in a later stage still leaves what came before
        print(f"PROBE_STAGE_DONE {label} {time.perf_counter() - t_start:.1f}s", flush=True)
        if out_dir:
            with open(os.path.join(out_dir, "probe_aimdo.partial.json"), "w") as f:
                json.dump(summary, f, indent=1, default=str)
    mem("00_start", summary["memory"])

    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--standalone"], capture_output=True,
                           text=True, timeout=240)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("STANDALONE_JSON ")]
        summary["standalone"] = json.loads(line[-1][len("STANDALONE_JSON "):]) if line else {
            "ok": False, "rc": p.returncode, "stdout_tail": p.stdout[-3000:], "stderr_tail": p.stderr[-3000:]}
        summary["standalone"]["rc"] = p.returncode
        summary["standalone"]["stderr_tail"] = p.stderr[-1500:]
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        summary["standalone"] = _err(e)
    summary["standalone_s"] = time.perf_counter() - t0
    checkpoint("standalone")

    mm = dev = block = None
    for stage in ("comfy", "imports", "block", "dynamic"):
        t0 = time.perf_counter()
        try:
            if stage == "comfy":
                mm, dev = comfy_stage(a.comfy_args, summary)
            elif stage == "imports":
                imports_stage(summary)
            elif stage == "block":
                block = block_stage(mm, dev, a.seq, summary)
            elif stage == "dynamic":
                if a.no_dynamic or block is None or not summary.get("aimdo_enabled"):
                    summary[f"{stage}_stage"] = {"ok": None, "skipped": "--no-dynamic, no block, or aimdo not enabled"}
                    continue
                dynamic_stage(mm, dev, block, a.seq, summary)
            summary[f"{stage}_stage"] = {"ok": True}
        except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
            summary[f"{stage}_stage"] = _err(e)
            if stage in ("comfy",):
                break
        summary[f"{stage}_stage"]["s"] = round(time.perf_counter() - t0, 2)
        checkpoint(stage)
    summary["total_s"] = time.perf_counter() - t_start

    text = json.dumps(summary, indent=1, default=str)
    if out_dir:
        with open(os.path.join(out_dir, "probe_aimdo.json"), "w") as f:
            f.write(text)
    print("PROBE_JSON_BEGIN")
    print(text)
    print("PROBE_JSON_END")


if __name__ == "__main__":
    main()
