"""The kernel-vs-reference comparison the kernel tests use (tests/kernels, tests/gpu): a kernel error bounded by
a multiple of a same-dtype torch reference's error."""

import pytest
import torch
import torch.nn.functional as F

from longmedia.testing.error_bounds import error_bound, max_abs_error, naive_attention


def _qkv(dtype=torch.float64, rows=97, keys=131, seed=None):
    g = torch.Generator()
    g.manual_seed(seed if seed is not None else torch.seed())
    return tuple(torch.randn(1, 2, n, 64, generator=g, dtype=torch.float64).to(dtype) for n in (rows, keys, keys))


def test_naive_attention_is_attention_and_keeps_its_dtype():
    q, k, v = _qkv()
    torch.testing.assert_close(naive_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-12)
    q16, k16, v16 = (t.half() for t in (q, k, v))
    out = naive_attention(q16, k16, v16)
    ref = F.scaled_dot_product_attention(*(t.double() for t in (q16, k16, v16)))
    assert out.dtype == torch.float16 and 0 < max_abs_error(out, ref) < 1e-2


def test_a_kernel_as_good_as_its_dtype_passes_and_a_worse_one_fails():
    q, k, v = _qkv(torch.float16)
    ref = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)))
    baseline = naive_attention(q, k, v)
    rounded = ref.half()                                   # an fp32-accumulating kernel: only the output rounding
    assert error_bound(rounded, ref, baseline).holds
    worse = 3 * max_abs_error(baseline, ref)                # a kernel three times as far off as torch in fp16
    g = torch.Generator().manual_seed(33)
    noisy = ref + worse * torch.randn(ref.shape, dtype=ref.dtype, generator=g).sign()
    bound = error_bound(noisy, ref, baseline)
    assert not bound.holds and bound.error > bound.limit and "same-dtype torch error" in str(bound)


def test_the_floor_covers_an_exact_baseline_and_shapes_must_match():
    ref = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(39))
    assert error_bound(ref + 5e-7, ref, ref.clone()).holds
    assert not error_bound(ref + 5e-6, ref, ref.clone()).holds
    with pytest.raises(ValueError, match="shapes differ"):
        error_bound(ref[:2], ref, ref)


def test_an_approximate_kernel_is_held_to_its_own_reference_with_the_dtype_noise_of_exact_attention():
    q, k, v = _qkv(torch.float16)
    exact = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)))
    approx = exact + 0.1 * torch.randn(exact.shape, dtype=exact.dtype, generator=torch.Generator().manual_seed(49))          # some approximation's high-precision reference
    baseline = naive_attention(q, k, v)
    assert error_bound(approx.half(), approx, baseline, baseline_reference=exact).holds
    assert not error_bound(exact.half(), approx, baseline, baseline_reference=exact).holds
