"""bench._kernel_categories: each rule on kernel names from real H100 traces (docs/lab/data's `kernels` rows) and
well-known ones, op scopes, and the order (a name that two rules match goes to the first)."""

from __future__ import annotations

import pytest

from bench._kernel_categories import ATTENTION_SCOPE, CATEGORIES, LABELS, RULES, category_of

FLASH2 = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
          "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, false, false, "
          "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
INT8_GEMM = ("void cutlass::Kernel2<cutlass::gemm::kernel::DefaultGemmWithVisitor<signed char, cutlass::layout::"
             "RowMajor, (cutlass::ComplexTransform)0, 16, signed char, cutlass::layout::ColumnMajor>>(Params)")
QUANT = ("void comfy::(anonymous namespace)::quantize_int8_rowwise_kernel<__nv_bfloat16, 512, false>(__nv_bfloat16 "
         "const*, signed char*, float*, int, unsigned long)")
ROPE = ("void comfy::(anonymous namespace)::rope_kernel<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, true, true, true, "
        "true, true>(__nv_bfloat16 const*, __nv_bfloat16 const*)")
MUL = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
       "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::"
       "TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::"
       "binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, {lambda(int)#1})")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<"
       "char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_"
        "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda("
        "c10::BFloat16)#1}> >(int, ...)")

CASES = [
    # attention
    (FLASH2, (), "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0", (), "attention"),
    ("_qstream_fwd", (), "attention"),
    ("_sol_fwd", (), "attention"),
    ("_summaries_fwd", (), "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", (), "attention"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, float const*, int)", (),
     "attention"),
    ("aten::topk", ("aten::matmul", ATTENTION_SCOPE), "attention"),       # Sol's routing inside an attention call
    # GEMM
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas", (), "gemm"),
    (INT8_GEMM, (), "gemm"),
    ("nvjet_sm90_tst_384x8_64x4_2x1_v_bz_bias_TNT", (), "gemm"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x32x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__"
     "5x_cublas", (), "gemm"),
    ("aten::mm", (), "gemm"),
    ("aten::addmm", (), "gemm"),
    ("aten::_int_mm", (), "gemm"),
    ("aten::_scaled_mm", (), "gemm"),
    # quantise / dequantise
    (QUANT, (), "quantise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::float8_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", (), "quantise"),
    ("aten::amax", ("aten::abs", "comfy_kitchen::int8_linear", "PythonSubclass"), "quantise"),
    ("_dequantize_rows_kernel", (), "quantise"),
    # rope
    (ROPE, (), "rope"),
    ("_rotary_embedding_kernel", (), "rope"),
    ("aten::mul", ("comfy_kitchen::rms_rope_split_half_",), "rope"),
    # norms & modulation
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float, "
     "c10::BFloat16 const*)", (), "norms_modulation"),
    (MUL, (), "norms_modulation"),
    (ADD, (), "norms_modulation"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctorOnSelf_add<c10::BFloat16>, std::array<"
     "char*, 2ul> >(int, ...)", (), "norms_modulation"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)"
     "::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}> >(int, ...)", (), "norms_modulation"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::addcmul_cuda_kernel("
     "at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}> >(int, ...)", (), "norms_modulation"),
    ("triton_poi_fused_add_mul_rsqrt_0", (), "norms_modulation"),
    ("aten::_fused_rms_norm", (), "norms_modulation"),
    ("aten::add_", (), "norms_modulation"),
    ("aten::copy_", ("aten::rms_norm",), "norms_modulation"),
    # copies / casts
    ("Memcpy DtoD (Device -> Device)", (), "copies"),
    ("Memcpy HtoD (Pinned -> Device)", (), "copies"),
    ("Memset (Device)", (), "copies"),
    (COPY, (), "copies"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", (), "copies"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_alignedK_contig<at::native::(anonymous namespace)::"
     "OpaqueType<4u>, unsigned int, 3, 128, 1, 16>(...)", (), "copies"),
    ("triton_poi_fused__to_copy_1", (), "copies"),
    ("aten::to", (), "copies"),
    ("aten::empty_strided", ("aten::_to_copy", "aten::to"), "copies"),
    # other
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, "
     "float, 4> >(...)", (), "other"),
    ("aten::view", (), "other"),
    ("void read_property_kernel<float>(float*)", (), "other"),       # "rope" inside "property" is not rope
    ("void broadcast_rows_kernel<float>(float*)", (), "other"),       # "cast" inside "broadcast" is not a cast
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous "
     "namespace)::where_kernel_impl(...)::{lambda()#1}> >(int, ...)", (), "other"),   # "nocast" is not a cast
]


@pytest.mark.parametrize(("name", "scopes", "category"), CASES, ids=[f"{c}:{n[:40]}" for n, _, c in CASES])
def test_each_rule_names_its_kernels(name, scopes, category):
    assert category_of(name, scopes) == category


def test_every_category_is_reached_and_labelled():
    assert {c for _, _, c in CASES} == set(CATEGORIES)
    assert [r.category for r in RULES] == list(CATEGORIES[:-1])    # one rule per category, in the table's order
    assert set(LABELS) == set(CATEGORIES)


ORDER = [  # (name, scopes, the first rule, a later rule it also matches)
    (FLASH2, (), "attention", "gemm"),                                 # FlashAttention's name holds "cutlass"
    ("aten::bmm", (ATTENTION_SCOPE,), "attention", "gemm"),            # a GEMM inside an attention call
    ("_attn_fwd_int8_qk_kernel", (), "attention", "quantise"),          # int8 attention (SageAttention-like)
    (INT8_GEMM + " int8", (), "gemm", "quantise"),                    # an int8 GEMM is GEMM, not quantise
    ("aten::_int_mm", ("comfy_kitchen::int8_linear",), "gemm", "quantise"),
    ("aten::mul", ("comfy_kitchen::int8_linear",), "quantise", "norms_modulation"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::float8_copy_kernel_cuda(...)>", (), "quantise",
     "copies"),
    ("comfy_kitchen::rms_rope_split_half_", (), "rope", "norms_modulation"),   # "rms" is a norm's word too
    ("aten::copy_", ("comfy_kitchen::rms_rope_split_half_",), "rope", "copies"),
    ("triton_poi_fused__to_copy_add_0", (), "norms_modulation", "copies"),
    ("aten::copy_", ("aten::rms_norm",), "norms_modulation", "copies"),
]


@pytest.mark.parametrize(("name", "scopes", "first", "later"), ORDER, ids=[f"{f}>{la}" for _, _, f, la in ORDER])
def test_a_name_two_rules_match_goes_to_the_first(name, scopes, first, later):
    rules = {r.category: r for r in RULES}

    def matches(rule):
        return bool(rule.pattern.search(name)) or (rule.scoped and any(rule.pattern.search(s) for s in scopes))

    assert matches(rules[first]) and matches(rules[later])             # both rules really match
    assert CATEGORIES.index(first) < CATEGORIES.index(later)
    assert category_of(name, scopes) == first


def test_gemm_is_matched_on_the_name_only():
    """Work inside a GEMM op that is not itself a GEMM kernel keeps its own category."""
    assert category_of("Memcpy DtoD (Device -> Device)", ("aten::mm",)) == "copies"
    assert category_of("aten::view", ("aten::matmul", "aten::linear")) == "other"
