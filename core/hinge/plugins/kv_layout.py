"""The KV pool every selected attention backend reads: page size, page layout, KV dtype.

One pool serves all attention backends of a plan (``attention``, or ``attention_prefill`` and
``attention_decode``), so they must agree on it. The page size is:

- ``page_size`` when the user set it: every backend must accept it (else a plan reason naming
  the backend and the sizes it takes);
- else the first of the backends' ``preferred_page_sizes`` (prefill backend's first) that every
  backend accepts and the cache policy's ``page_size_multiple`` divides; else the device default
  (``hinge.config.DEVICE_DEFAULTS``) when all accept it; else the smallest size all accept.

The pool builds ``nhd`` pages in the model dtype; a backend declaring another layout, or KV
dtypes without the model dtype, is refused with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hinge.plugins.capabilities import POOL_KV_LAYOUT
from hinge.plugins.specs import KIND_LABELS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hinge.config import EngineConfig
    from hinge.plugins.plan import SelectedComponent


def _label(c: SelectedComponent) -> str:
    return f"{KIND_LABELS[c.slot]} {c.name!r} ({c.plugin})"


def _sizes(c: SelectedComponent) -> str:
    sizes = c.spec.capabilities.page_sizes
    return "any" if sizes is None else ", ".join(map(str, sorted(sizes)))


def _accepts(c: SelectedComponent, page: int) -> bool:
    sizes = c.spec.capabilities.page_sizes
    return sizes is None or page in sizes


def choose_page_size(config: EngineConfig, attention: Sequence[SelectedComponent],
                     cache: SelectedComponent | None = None, default: int | None = None
                     ) -> tuple[int, str | None, list[str]]:
    """(page size, a note when the backends chose it, reasons it cannot work).

    :param config: the resolved config (``page_size`` set; ``page_size_is_default`` tells
        whether the user chose it).
    :param attention: the distinct attention backends of the plan, prefill's first.
    :param default: the device default page size (None = ``config.page_size``).
    """
    multiple = cache.spec.capabilities.page_size_multiple if cache is not None else 1
    if not config.page_size_is_default:
        page = config.page_size
        reasons = [f"{_label(c)} does not support page_size {page}; it supports {_sizes(c)} "
                   "(set page_size, or leave it unset to let the plan choose)"
                   for c in attention if not _accepts(c, page)]
        return page, None, reasons

    default = default or config.page_size

    def fits(page: int) -> bool:
        return page % multiple == 0 and all(_accepts(c, page) for c in attention)

    preferred = [p for c in attention for p in c.spec.capabilities.preferred_page_sizes]
    for page in preferred:
        if fits(page):
            owners = [c.name for c in attention if page in c.spec.capabilities.preferred_page_sizes]
            note = None if page == default else \
                f"page_size = {page} (preferred by {', '.join(owners)}; the {config.device} default is {default})"
            return page, note, []
    if fits(default):
        return default, None, []
    declared = [c.spec.capabilities.page_sizes for c in attention if c.spec.capabilities.page_sizes]
    common = set.intersection(*map(set, declared)) if declared else set()
    common = {p for p in common if p % multiple == 0}
    if common:
        page = min(common)
        return page, f"page_size = {page} (the smallest every attention backend takes: " + \
            "; ".join(f"{c.name}: {_sizes(c)}" for c in attention) + ")", []
    what = "; ".join(f"{_label(c)} takes {_sizes(c)}" for c in attention)
    cache_note = f", and {_label(cache)} needs a multiple of {multiple}" if multiple > 1 else ""
    return default, None, [f"no page size suits every selected component: {what}{cache_note}; "
                           "select attention backends that share a page size"]


def layout_reasons(plan_dtype: str, attention: Sequence[SelectedComponent]) -> list[str]:
    """Page layout and KV dtype: the pool builds ``nhd`` pages in the model dtype."""
    reasons = []
    for c in attention:
        caps: Any = c.spec.capabilities
        if caps.kv_layout != POOL_KV_LAYOUT:
            reasons.append(f"{_label(c)} reads {caps.kv_layout} KV pages, but the KV pool builds "
                           f"{POOL_KV_LAYOUT} pages ((page_size, num_kv_heads, head_dim), K and V "
                           "apart); select another backend")
        if caps.kv_dtypes is not None and plan_dtype not in caps.kv_dtypes:
            reasons.append(f"{_label(c)} reads KV in {', '.join(sorted(caps.kv_dtypes))}, but the "
                           f"pool holds KV in the model dtype {plan_dtype} (set dtype)")
    return reasons
