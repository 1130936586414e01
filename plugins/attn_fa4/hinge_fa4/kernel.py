"""The kernel the backend calls: ``flash_attn.cute``'s ``flash_attn_varlen_func`` over paged KV
(``FA4Kernel``), or its torch restatement (``hinge_fa4.reference_kernel.ReferenceKernel``).

Both take the same keyword arguments, flash-attn's own: queries packed ``(total_q, H, D)`` with
``cu_seqlens_q``, keys read through ``page_table`` (int32) up to ``seqused_k`` (int32) per request
from ``(num_pages, page_size, Hkv, D)`` pages; causal masks bottom-right aligned. The KV cache is
written before attention (the wrapper appends nothing), as sglang's FA4 path does.

``split_decode`` is the one call of a split step (``hinge_fa4.split``): V virtual requests of one
query each, non-causal, lse returned. ``FA4Kernel`` passes the queries batched, ``(V, 1, H, D)``
without ``cu_seqlens_q`` (flash-attn's fixed-length form with ``seqused_k`` and a page table):
the plain tile scheduler, with no per-call tile-count kernels, which the varlen form launches
past 256 requests; ``split_call = varlen`` passes them as ``cu_seqlens_q = arange`` instead.
``split_tile_m = 64`` (the default) makes the batched call through flash-attn's private
``_flash_attn_fwd`` with a 64-row query tile (its public functions take no tile size): one MMA
warpgroup on a tile a decode query mostly pads, faster in every batch and split size the H200
measured (docs/benchmarks.md, sixth session). If the installed flash-attn-4 lacks that function,
the call falls back to the public one (128-row tiles) with a warning.

``early_launch`` (on where ``hinge.devices.early_dependents`` is) makes every call through
``hinge_fa4.early.early_forward``: flash-attn's sm_90 forward launched early, waiting for the
kernel before it in-kernel (that module says how).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from hinge_fa4.early import early_forward

if TYPE_CHECKING:
    from hinge_fa4.options import FA4Options

logger = logging.getLogger(__name__)


class FA4Kernel:
    """``flash_attn.cute.flash_attn_varlen_func``, imported on construction (after the JIT cache
    switches are set)."""

    name = "fa4"

    def __init__(self, options: FA4Options, device: torch.device) -> None:
        from hinge_fa4 import FLASH_ATTN_4_VERSION
        from hinge_fa4.availability import installed_version
        from hinge_fa4.jit import configure_jit_cache

        cache = configure_jit_cache(options.jit_cache, options.jit_cache_dir)
        version = installed_version()
        if version != FLASH_ATTN_4_VERSION:
            logger.warning("fa4: flash-attn-4 %s is installed; hinge_fa4 is tested with %s (the "
                           "API changes between betas)", version, FLASH_ATTN_4_VERSION)
        from flash_attn.cute import flash_attn_varlen_func

        self._varlen: Any = flash_attn_varlen_func
        self.split_overlap = options.split_intra_wg_overlap
        self.split_rs = options.split_mma_pv_is_rs
        self._fwd: Any = private_forward(options.split_tile_m, options.split_tile_n,
                                         tuned=not (self.split_overlap and self.split_rs))
        self.split_call = options.split_call
        self.split_tile_m = options.split_tile_m if self._fwd is not None else 128
        self.split_tile_n = options.split_tile_n if self._fwd is not None else 128
        self.split_pack_gqa = options.split_pack_gqa
        self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.early = early_launch(options, device)
        self._early_proven = False  #: an early call has succeeded (its failures are then real)
        logger.info("fa4: flash-attn-4 %s, %d SMs, JIT cache %s", version, self.num_sms,
                    cache or "off")

    def varlen(self, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, *,
               cu_seqlens_q: torch.Tensor, seqused_k: torch.Tensor, page_table: torch.Tensor,
               max_seqlen_q: int, softmax_scale: float, causal: bool,
               window_left: int | None = None, softcap: float | None = None,
               return_lse: bool = False, pack_gqa: bool | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``pack_gqa``: flash-attn's choice (None) unless a split call sets it."""
        out, lse = self._call(
            self._varlen, q, k_pages, v_pages, cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=max_seqlen_q, seqused_k=seqused_k, page_table=page_table,
            softmax_scale=softmax_scale, causal=causal,
            window_size=(window_left, 0 if window_left is not None else None),
            softcap=softcap or 0.0, return_lse=return_lse, pack_gqa=pack_gqa)
        return out, lse

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` (flash-attn's forward) launched early when ``self.early``. A first early call
        that fails where the plain one succeeds (a flash-attn-4 whose sm_90 class no longer fits
        ``hinge_fa4.early``) turns early launch off with a warning; the caller's own errors come
        from the plain call, unchanged."""
        if not self.early:
            return fn(*args, **kwargs)
        try:
            with early_forward():
                result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - retried plainly below; a real error re-raises there
            if self._early_proven:
                raise
            result = fn(*args, **kwargs)
            logger.warning("fa4: flash-attn's sm_90 forward could not be launched early (%s: %s); "
                           "it is launched plainly from now on (attention_options early_launch="
                           "false silences this)", type(exc).__name__, exc)
            self.early = False
            return result
        self._early_proven = True
        return result

    def split_decode(self, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, *,
                     seqused_k: torch.Tensor, page_table: torch.Tensor, softmax_scale: float,
                     softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(V, H, D) queries, one per virtual request -> (V, H, D) outputs and (V, H) lse (a
        view: any strides)."""
        v, heads, dim = q.shape
        if self.split_call == "varlen":
            cu = torch.arange(v + 1, dtype=torch.int32, device=q.device)
            out, lse = self.varlen(q, k_pages, v_pages, cu_seqlens_q=cu, seqused_k=seqused_k,
                                   page_table=page_table, max_seqlen_q=1,
                                   softmax_scale=softmax_scale, causal=False, softcap=softcap,
                                   return_lse=True, pack_gqa=self.split_pack_gqa)
            return out, lse.t()
        if self._fwd is not None:  # a tile or schedule other than flash-attn's own
            out, lse, *_ = self._call(
                self._fwd, q.view(v, 1, heads, dim), k_pages, v_pages, seqused_k=seqused_k,
                page_table=page_table, softmax_scale=softmax_scale, causal=False,
                softcap=softcap or 0.0, return_lse=True,
                tile_mn=(self.split_tile_m, self.split_tile_n),
                num_threads=128 * (1 + self.split_tile_m // 64), pack_gqa=self.split_pack_gqa,
                intra_wg_overlap=self.split_overlap, mma_pv_is_rs=self.split_rs)
        else:
            out, lse = self._call(
                self._varlen, q.view(v, 1, heads, dim), k_pages, v_pages, seqused_k=seqused_k,
                page_table=page_table, softmax_scale=softmax_scale, causal=False,
                softcap=softcap or 0.0, return_lse=True, pack_gqa=self.split_pack_gqa)
        return out.view(v, heads, dim), lse[:, :, 0]  # lse: (V, H, 1)


def private_forward(tile_m: int, tile_n: int = 128, *, tuned: bool = False) -> Any:
    """flash-attn's private ``_flash_attn_fwd`` for a ``tile_m`` x ``tile_n`` split call (or,
    ``tuned``, one with another warpgroup schedule), or None: for 128 x 128 untuned (its own
    choice: the public function serves), or when the installed flash-attn-4 has no such function
    taking ``tile_mn`` (a warning says so; the public call then runs)."""
    if (tile_m, tile_n) == (128, 128) and not tuned:
        return None
    import inspect

    try:
        from flash_attn.cute.interface import _flash_attn_fwd  # NOTE: private, version-pinned
    except ImportError as exc:
        logger.warning("fa4: split tiles %dx%d need flash_attn.cute.interface._flash_attn_fwd (%s); "
                       "split calls use 128-row tiles", tile_m, tile_n, exc)
        return None
    params = inspect.signature(_flash_attn_fwd).parameters
    missing = PRIVATE_PARAMETERS - params.keys()
    if missing:
        logger.warning("fa4: this flash-attn-4's _flash_attn_fwd takes no %s; split calls use "
                       "128-row tiles and flash-attn's schedule (split tiles %dx%d ignored)",
                       "/".join(sorted(missing)), tile_m, tile_n)
        return None
    return _flash_attn_fwd


#: what ``FA4Kernel.split_decode`` passes the private function beyond the public one's arguments
PRIVATE_PARAMETERS = frozenset({"tile_mn", "num_threads", "pack_gqa", "intra_wg_overlap", "mma_pv_is_rs"})


def early_launch(options: FA4Options, device: torch.device) -> bool:
    """Whether flash-attn's forward is launched early: ``options.early_launch``, or where it is
    None, ``hinge.devices.early_dependents`` (CUDA of compute capability 9.x, ``$HINGE_PDL`` not
    0); only sm_90's forward class is wrapped, so never on another major version."""
    from hinge.devices import early_dependents

    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] != 9:
        if options.early_launch:
            logger.warning("fa4: early_launch applies to sm_90's forward only; %s runs it plainly",
                           device)
        return False
    return early_dependents(device) if options.early_launch is None else options.early_launch


def make_kernel(options: FA4Options, device: torch.device) -> Any:
    """The kernel ``options.kernel`` names; fa4 needs a CUDA device."""
    if options.kernel == "reference":
        from hinge_fa4.reference_kernel import ReferenceKernel

        return ReferenceKernel()
    if device.type != "cuda":
        raise ValueError(f"attention backend 'fa4' runs its kernels on cuda, not {device.type}; "
                         "use device cuda, or attention_options kernel=reference (a torch emulation)")
    return FA4Kernel(options, device)
