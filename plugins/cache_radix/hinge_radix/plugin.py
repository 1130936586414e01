"""Hookimpls of the ``radix`` plugin (registered through the ``hinge.plugins`` entry point).

Importing this module imports no kernel and no tree: the factory is a ``"module:attr"`` string.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from hinge import hookimpl
from hinge.plugins import CacheCapabilities, CachePolicySpec


class RadixOptions(BaseModel):
    """``cache_options`` of ``cache = "radix"`` (the checkpoint grid and budget are engine
    settings: ``track_interval``, ``checkpoint_slots``); unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")
    #: cache a request's computed prefix after each prefill chunk too, not only when it leaves, so a
    #: request sent while a long prompt is still in chunked prefill hits it (sglang does the same)
    insert_unfinished: bool = True


RADIX_SPEC = CachePolicySpec(
    name="radix",
    factory="hinge_radix.cache:RadixCache",
    capabilities=CacheCapabilities(prefix_sharing=True, recurrent_state=True, batch_invariant=True,
                                   prefill_graph=True, decode_graph=True, draft_graph=True),
    options_model=RadixOptions,
    description="radix prefix cache over KV pages, with recurrent-state checkpoints for hybrid models",
)


@hookimpl
def register_cache_policies(register):
    register(RADIX_SPEC)
