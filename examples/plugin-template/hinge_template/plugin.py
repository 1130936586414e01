"""The hookimpls: one attention backend, ``template-sdpa``. Imports nothing heavy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hinge import hookimpl
from hinge.plugins import AttentionBackendSpec, AttentionCapabilities


class TemplateOptions(BaseModel):
    """Options users set with ``attention_options`` (unknown keys are rejected)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    upcast: bool = Field(False, description="compute attention in float32 for 16-bit dtypes")


TEMPLATE_SDPA = AttentionBackendSpec(
    name="template-sdpa",
    factory="hinge_template.attention:TemplateSDPABackend",
    capabilities=AttentionCapabilities(
        sliding_window=True,
        graph_note="per-request SDPA calls with host-side lengths",
    ),
    options_model=TemplateOptions,
    description="paged attention: torch scaled_dot_product_attention, one request at a time",
)


@hookimpl
def register_attention_backends(register):
    register(TEMPLATE_SDPA)
