"""Triton's interpreter ``tl.dot`` as hinge's tests run it (``exact_float_dot``): a row's bits do
not depend on its place in the block or on the block's size, on any host (numpy's float32
``matmul`` gave a row other bits at another offset on an AVX-512 machine, which made the
``triton`` attention backend's batch-invariance tests pass or fail by machine)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from hinge.builtin.triton_kernels import exact_float_dot  # noqa: E402


def handle(array):
    return interpreter.TensorHandle(array, tl.float32 if array.dtype == np.float32 else tl.int32)


def test_a_float_dot_is_the_float64_sum_rounded_once_for_every_row_at_every_place():
    untouched = []
    dot = exact_float_dot(lambda *args: untouched.append(args))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((16, 48)).astype(np.float32)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    whole = dot(None, handle(a), handle(b), handle(np.zeros((64, 48), np.float32)), None, None)
    assert whole.data.dtype == np.float32 and np.array_equal(whole.data, want)
    for start, rows in ((1, 24), (5, 7), (40, 24), (63, 1)):
        part = dot(None, handle(a[start:start + rows]), handle(b),
                   handle(np.zeros((rows, 48), np.float32)), None, None)
        assert np.array_equal(part.data, want[start:start + rows]), (start, rows)
    acc = np.ones((64, 48), np.float32)
    assert np.array_equal(dot(None, handle(a), handle(b), handle(acc), None, None).data, want + acc)
    assert not untouched


def test_an_integer_dot_goes_to_the_interpreters_own():
    seen = []
    dot = exact_float_dot(lambda self, a, b, d, *rest: seen.append(a.data.dtype) or "theirs")
    ints = np.ones((2, 2), np.int32)
    assert dot(None, handle(ints), handle(ints), handle(ints), None, None) == "theirs"
    assert seen == [np.int32]
