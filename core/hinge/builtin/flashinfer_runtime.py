"""flashinfer itself: the lazy import (with its on-disk JIT cache), layer signatures, and one
planned wrapper.

flashinfer JIT-compiles each kernel (dtype, head dim, sliding window, soft cap, ...) on first
use with nvcc and keeps the result under ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer``
(``FLASHINFER_WORKSPACE_BASE`` defaults to the home directory), so a second process loads it
instead of compiling. flashinfer reads that variable when it is imported, hence
``load_flashinfer`` sets it first.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hinge.devices import num_sms

if TYPE_CHECKING:
    from hinge.builtin.flashinfer_layout import PlanTables

logger = logging.getLogger(__name__)

ENV_CACHE_BASE = "FLASHINFER_WORKSPACE_BASE"


class FlashInferUnavailable(ValueError):
    """flashinfer cannot be imported; the message says what failed and what to do."""


def load_flashinfer(jit_cache_base: str | None = None) -> Any:
    """Import flashinfer (once per process), its JIT cache under ``jit_cache_base`` if given."""
    if jit_cache_base is not None:
        base = str(Path(jit_cache_base).expanduser())
        if "flashinfer" in sys.modules and os.environ.get(ENV_CACHE_BASE) != base:
            logger.warning("flashinfer was imported before its JIT cache base could be set to %s; "
                           "kernels stay cached under %s (set %s before starting instead)",
                           base, jit_cache_dir(), ENV_CACHE_BASE)
        else:
            os.environ[ENV_CACHE_BASE] = base
    try:
        return importlib.import_module("flashinfer")
    except Exception as exc:  # noqa: BLE001 - any import failure means the same to the user
        raise FlashInferUnavailable(
            f"attention backend 'flashinfer' cannot import flashinfer ({type(exc).__name__}: "
            f"{exc}); install it with `pip install -c constraints.txt -e '.[gpu]'` "
            "(flashinfer-python) on a CUDA machine, or select attention=torch") from exc


def jit_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where flashinfer keeps compiled kernels: ``<FLASHINFER_WORKSPACE_BASE or ~>/.cache/flashinfer``."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(ENV_CACHE_BASE) or Path.home()) / ".cache" / "flashinfer"


@dataclass(frozen=True)
class Signature:
    """What a flashinfer plan fixes about a layer: layers that share it share one plan per step."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    scale: float
    window_left: int  #: keys ``p - window_left .. p`` are visible; -1 = no window
    soft_cap: float  #: logits soft cap ``c * tanh(s / c)``; 0 = none

    @classmethod
    def of(cls, layer: Any) -> Signature:
        # hinge's window: keys older than p - sliding_window + 1 are masked
        window = layer.sliding_window
        return cls(layer.num_heads, layer.num_kv_heads, layer.head_dim, float(layer.scale),
                   -1 if window is None else int(window) - 1,
                   float(getattr(layer, "logits_soft_cap", None) or 0.0))

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads

    def plan_kwargs(self, dtype: torch.dtype) -> dict[str, Any]:
        """The keyword arguments every plan of this signature takes."""
        return dict(sm_scale=self.scale, window_left=self.window_left,
                    logits_soft_cap=self.soft_cap or None, q_data_type=dtype, kv_data_type=dtype)


def decode_disables_split(option: str, rows: int, sig: Signature, num_sms: int) -> bool:
    """``decode_split_kv``: whether a decode plan of ``rows`` requests passes flashinfer
    ``disable_split_kv``: ``never``, or ``auto`` once the (request, KV head) pairs fill ``num_sms``
    (each is at least one work tile; a split only adds a merge); ``planner``: never passed."""
    return option == "never" or (option == "auto" and rows * sig.num_kv_heads >= num_sms)


def use_tensor_core_decode(option: str, sig: Signature) -> bool:
    """``on``/``off``, or ``auto``: when one KV head serves at least 4 query heads."""
    return option == "on" or (option == "auto" and sig.group_size >= 4)


class PlannedWrapper:
    """One flashinfer wrapper, planned on the host and run by every layer of its signature.

    A plan stages its schedule in the wrapper's pinned host buffer and copies it to the device
    without waiting; the next plan of the same wrapper first waits for that copy, else it could
    overwrite the tables of a step still queued on the device (mini-sglang #103).
    """

    def __init__(self, inner: Any, kind: str, device: torch.device, split_kv: str = "auto"):
        self.inner = inner
        self.kind = kind  #: "prefill" (qo_indptr + causal) or "decode" (one row per request)
        self.split_kv = split_kv  #: ``FlashInferOptions.decode_split_kv`` (decode plans only)
        self._cuda = device.type == "cuda"
        self._sms = num_sms(device)
        self._copied: torch.cuda.Event | None = None

    def plan(self, sig: Signature, dtype: torch.dtype, page_size: int, tables: PlanTables,
             indices: torch.Tensor) -> None:
        if self._copied is not None:
            self._copied.synchronize()
        head = (sig.num_heads, sig.num_kv_heads, sig.head_dim, page_size)
        # NOTE: seq_lens given, flashinfer copies our pinned lengths instead of pageable ones
        kwargs = dict(sig.plan_kwargs(dtype), seq_lens=tables.kv_lens)
        if self.kind == "decode":
            # NOTE: a graph wrapper's rows are fixed, so its choice is the same every replay
            if decode_disables_split(self.split_kv, tables.last_page_len.numel(), sig, self._sms):
                kwargs["disable_split_kv"] = True
            self.inner.plan(tables.kv_indptr, indices, tables.last_page_len, *head, **kwargs)
        else:
            self.inner.plan(tables.qo_indptr, tables.kv_indptr, indices, tables.last_page_len,
                            *head, causal=True, **kwargs)
        if self._cuda:
            self._copied = torch.cuda.Event()
            self._copied.record()

    def run(self, q: torch.Tensor, paged_kv: tuple[torch.Tensor, torch.Tensor],
            out: torch.Tensor) -> torch.Tensor:
        return self.inner.run(q, paged_kv, out=out)
