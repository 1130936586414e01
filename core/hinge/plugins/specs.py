"""Specs: what a plugin hands the core for each component, and how a component is built.

A spec names the component (the name users type in config), declares its capabilities, gives
its options model and a *lazy* factory: a callable, or a ``"module:attr"`` string imported only
when the component is built, so that importing a plugin never imports its kernels.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from hinge.plugins.capabilities import (
    AttentionCapabilities,
    CacheCapabilities,
    Capabilities,
    GrammarCapabilities,
    QuantizerCapabilities,
    SpeculatorCapabilities,
)

if TYPE_CHECKING:
    import torch

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass
class BuildContext:
    """What a factory is told about the engine it builds for: ``factory(options, build)``."""

    device: str  # "cpu" | "cuda"
    dtype: torch.dtype
    deterministic: bool
    page_size: int
    model_config: Any = None  # hinge.models.base.ModelConfig when known
    rank: int = 0  # tensor-parallel rank of this process (weight loaders cut this rank's shard)
    world_size: int = 1  # tensor-parallel size; 1 = no tensor parallelism
    tokenizer: Any = None  # hinge's Tokenizer (grammar backends: ``backend``, ``eos_token_ids``)


class OptionsError(ValueError):
    """A component's options did not validate; the message names the component and the fix."""


class ComponentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    kind: ClassVar[str] = "component"
    hook: ClassVar[str] = ""

    name: str
    factory: Callable[..., Any] | str
    capabilities: Capabilities
    options_model: type[BaseModel] | None = None
    description: str = ""
    #: ``availability(machine) -> str | None``: why the component cannot run on this machine
    #: (a package missing, a GPU generation its kernels do not cover), None when it can; a
    #: callable or a ``"module:attr"`` string. Cheap, no kernel import (``hinge.plugins.availability``)
    availability: Callable[..., Any] | str | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"component name {value!r} must be lowercase letters, digits, '-', '_' or '.', "
                "starting with a letter or digit (it is what users type in config)"
            )
        return value

    @field_validator("factory", "availability")
    @classmethod
    def _check_factory(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str) and (value.count(":") != 1 or not all(value.split(":"))):
            raise ValueError(f"{info.field_name} {value!r} must be a callable or a 'module:attr' string")
        return value

    @field_validator("options_model")
    @classmethod
    def _check_options_model(cls, value: Any) -> Any:
        if value is not None and not (isinstance(value, type) and issubclass(value, BaseModel)):
            raise ValueError(f"options_model must be a pydantic model class or None, got {value!r}")
        return value

    def load_factory(self) -> Callable[..., Any]:
        """Import a ``"module:attr"`` factory (the heavy import happens here, at build time)."""
        return _load(self.factory)

    def load_availability(self) -> Callable[..., Any] | None:
        """The availability check as a callable (None when the spec has none)."""
        return None if self.availability is None else _load(self.availability)

    def validate_options(self, options: dict[str, Any] | None) -> BaseModel | None:
        """Options dict -> the options model instance; unknown keys name the known ones."""
        options = dict(options or {})
        label = f"{KIND_LABELS.get(self.kind, self.kind)} {self.name!r}"
        if self.options_model is None:
            if options:
                raise OptionsError(
                    f"{label} takes no options, got: {', '.join(sorted(options))}; "
                    f"remove them from {self.kind}_options"
                )
            return None
        known = sorted(self.options_model.model_fields)
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise OptionsError(
                f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                f"for {label}; known options: {', '.join(known) or '(none)'}"
            )
        try:
            return self.options_model.model_validate(options)
        except ValidationError as exc:
            lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
            raise OptionsError(f"invalid options for {label}: " + "; ".join(lines)) from None

    def build(self, options: BaseModel | None, build: BuildContext) -> Any:
        return self.load_factory()(options, build)


def _load(target: Callable[..., Any] | str) -> Callable[..., Any]:
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class QuantizerSpec(ComponentSpec):
    kind: ClassVar[str] = "quantizer"
    hook: ClassVar[str] = "register_quantizers"
    capabilities: QuantizerCapabilities = QuantizerCapabilities()


class AttentionBackendSpec(ComponentSpec):
    kind: ClassVar[str] = "attention"
    hook: ClassVar[str] = "register_attention_backends"
    capabilities: AttentionCapabilities = AttentionCapabilities()


class SpeculatorSpec(ComponentSpec):
    kind: ClassVar[str] = "speculator"
    hook: ClassVar[str] = "register_speculators"
    capabilities: SpeculatorCapabilities = SpeculatorCapabilities()


class CachePolicySpec(ComponentSpec):
    kind: ClassVar[str] = "cache"
    hook: ClassVar[str] = "register_cache_policies"
    capabilities: CacheCapabilities = CacheCapabilities()


class GrammarBackendSpec(ComponentSpec):
    """A structured-output backend: its factory returns a ``hinge.grammar.GrammarBackend``
    built for ``build.tokenizer`` and ``build.model_config.vocab_size``."""

    kind: ClassVar[str] = "grammar"
    hook: ClassVar[str] = "register_grammar_backends"
    capabilities: GrammarCapabilities = GrammarCapabilities()


#: slot name (as in EngineConfig) -> spec class
SPEC_TYPES: dict[str, type[ComponentSpec]] = {
    "attention": AttentionBackendSpec,
    "quantizer": QuantizerSpec,
    "cache": CachePolicySpec,
    "speculator": SpeculatorSpec,
    "grammar": GrammarBackendSpec,
}

KIND_LABELS = {
    "attention": "attention backend",
    "quantizer": "quantizer",
    "cache": "cache policy",
    "speculator": "speculator",
    "grammar": "grammar backend",
}
