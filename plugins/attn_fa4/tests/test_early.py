"""``hinge_fa4.early`` on the CPU: the forward class and its compile cache are swapped for one
call and put back (also on an error), the launcher adds ``use_pdl``, and only sm_90 CUDA devices
launch early. The kernel itself (its waits, and bits equal to the plain launch) is tested on a
GPU in test_early_gpu.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hinge_fa4.early import _EarlyLaunch, early_forward
from hinge_fa4.kernel import early_launch
from hinge_fa4.options import FA4Options


def fake_interface():
    def _flash_attn_fwd():
        pass

    _flash_attn_fwd.compile_cache = {"plain key": "plain kernel"}
    return SimpleNamespace(FlashAttentionForwardSm90="plain class", _flash_attn_fwd=_flash_attn_fwd)


def test_the_early_class_and_its_own_cache_are_in_place_for_the_call_only():
    interface, cache = fake_interface(), {}
    with early_forward(interface, early_class="early class", compile_cache=cache):
        assert interface.FlashAttentionForwardSm90 == "early class"
        assert interface._flash_attn_fwd.compile_cache is cache, "never the plain kernels' cache"
    assert interface.FlashAttentionForwardSm90 == "plain class"
    assert interface._flash_attn_fwd.compile_cache == {"plain key": "plain kernel"}


def test_an_error_inside_the_call_puts_the_plain_class_back():
    interface = fake_interface()
    with pytest.raises(RuntimeError, match="compile failed"):
        with early_forward(interface, early_class="early class", compile_cache={}):
            raise RuntimeError("compile failed")
    assert interface.FlashAttentionForwardSm90 == "plain class"
    assert "plain key" in interface._flash_attn_fwd.compile_cache


def test_the_launcher_adds_the_programmatic_launch_and_keeps_the_rest():
    calls = []
    launcher = SimpleNamespace(launch=lambda *a, **k: calls.append((a, k)) or "launched", smem=7)
    early = _EarlyLaunch(launcher)
    assert early.launch(grid=[8, 1, 1], block=[256, 1, 1], use_pdl=False) == "launched"
    assert calls == [((), {"grid": [8, 1, 1], "block": [256, 1, 1], "use_pdl": True})]
    assert early.smem == 7


@pytest.mark.parametrize("setting", [None, True, False])
def test_a_cpu_device_never_launches_early(setting):
    assert early_launch(FA4Options(early_launch=setting), torch.device("cpu")) is False


def test_early_launch_takes_only_a_bool_or_none():
    with pytest.raises(ValueError, match="early_launch"):
        FA4Options(early_launch="sometimes")


# -- FA4Kernel._call: a first early call that cannot work falls back to the plain launch --------


def kernel_with(monkeypatch, early_fails: bool):
    """An ``FA4Kernel`` without flash-attn (``_call`` only); the early launch (its class swap)
    raises when ``early_fails``, as a flash-attn-4 whose sm_90 class does not fit would."""
    from contextlib import contextmanager

    import hinge_fa4.kernel as kernel_module
    from hinge_fa4.kernel import FA4Kernel

    launches = []

    @contextmanager
    def fake_early_forward():
        if early_fails:
            raise TypeError("EarlyForwardSm90.load: no such method")
        launches.append("early")
        yield

    monkeypatch.setattr(kernel_module, "early_forward", fake_early_forward)
    kernel = object.__new__(FA4Kernel)
    kernel.early, kernel._early_proven = True, False
    return kernel, launches


def test_a_first_early_call_that_cannot_work_falls_back_to_the_plain_launch(monkeypatch, caplog):
    kernel, _ = kernel_with(monkeypatch, early_fails=True)
    assert kernel._call(lambda x: x + 1, 1) == 2
    assert kernel.early is False and "launched plainly from now on" in caplog.text
    assert "no such method" in caplog.text, "the warning names what failed"


def test_the_callers_own_error_comes_from_the_plain_call_unchanged(monkeypatch):
    kernel, _ = kernel_with(monkeypatch, early_fails=True)

    def bad_call():
        raise ValueError("head dim 96 is not supported")

    with pytest.raises(ValueError, match="head dim 96"):
        kernel._call(bad_call)


def test_once_an_early_call_has_worked_its_errors_are_raised(monkeypatch):
    kernel, launches = kernel_with(monkeypatch, early_fails=False)
    assert kernel._call(lambda: "out") == "out" and launches == ["early"]
    assert kernel._early_proven

    def failing():
        raise RuntimeError("CUDA error: an illegal memory access")

    with pytest.raises(RuntimeError, match="illegal memory"):
        kernel._call(failing)
    assert kernel.early is True


def test_two_threads_calling_early_leave_the_plain_class_in_place():
    """Thread a enters, thread b tries to; a leaves, then b. Were b inside while a left, b would
    restore the early class it found (the swap's lock keeps b out until a has left)."""
    import threading

    interface, cache = fake_interface(), {}
    a_inside, a_may_leave, b_may_leave = threading.Event(), threading.Event(), threading.Event()

    def a():
        with early_forward(interface, early_class="early class", compile_cache=cache):
            a_inside.set()
            assert a_may_leave.wait(5)

    def b():
        with early_forward(interface, early_class="early class", compile_cache=cache):
            assert b_may_leave.wait(5)

    ta = threading.Thread(target=a)
    ta.start()
    assert a_inside.wait(5)
    tb = threading.Thread(target=b)
    tb.start()
    tb.join(0.2)  # b is at the lock (or, without it, inside)
    a_may_leave.set()
    ta.join(5)
    b_may_leave.set()
    tb.join(5)
    assert interface.FlashAttentionForwardSm90 == "plain class"
    assert interface._flash_attn_fwd.compile_cache == {"plain key": "plain kernel"}
