"""``hinge.devices``: host lists to device tensors, one at a time or several in one staged copy."""

from __future__ import annotations

import pytest
import torch

from hinge.devices import staged, to_device, to_device_all

LISTS = {"rows": ([3, 1, 2], torch.int32), "temps": ([0.75, 1.0], torch.float32),
         "none": ([], torch.int64), "keys": ([2**62 + 5, -1, 7], torch.int64),
         "flags": ([1, 0, 1, 1, 0], torch.uint8), "p": ([0.25], torch.float64)}


def test_one_staged_copy_gives_every_list_back_with_its_values_and_dtype():
    # odd byte counts first (12, 8, 0, ...): each view must start where its own bytes were put
    host = {name: torch.tensor(v, dtype=d) for name, (v, d) in LISTS.items()}
    got = staged(host, "cpu", pin=False)
    assert list(got) == list(LISTS)
    for name, (values, dtype) in LISTS.items():
        assert got[name].dtype == dtype and got[name].tolist() == values, name
    assert len({t.untyped_storage().data_ptr() for t in got.values()}) == 1  # one buffer


def test_on_the_cpu_every_list_is_what_to_device_gives():
    got = to_device_all(LISTS, "cpu")
    for name, (values, dtype) in LISTS.items():
        assert torch.equal(got[name], to_device(values, dtype, "cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_one_pinned_copy_gives_every_list_back():
    got = to_device_all(LISTS, "cuda")
    torch.cuda.synchronize()
    for name, (values, dtype) in LISTS.items():
        assert got[name].is_cuda and got[name].dtype == dtype and got[name].tolist() == values
