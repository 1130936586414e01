"""ResolvedPlan: the one component per slot that config selected, and every graph decision.

``resolve_plan(config, pm)`` turns names into registered specs (unknown names list what is
installed and which plugins failed), validates each component's options with its own model,
checks devices/dtypes/page sizes against capabilities, asks ``validate_plan`` impls for reasons,
and decides per phase (prefill, decode, draft) whether a CUDA graph is captured, with reasons.
Nothing is built here: ``plan.build_<slot>(build_context)`` calls a factory when the engine asks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hinge.plugins.capabilities import GRAPH_PHASES
from hinge.plugins.checks import capability_reasons, resolve_quantizer_name
from hinge.plugins.specs import KIND_LABELS, BuildContext, ComponentSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from hinge.config import EngineConfig
    from hinge.plugins.graphs import ModelVotes
    from hinge.plugins.manager import PluginManager

SLOTS = ("attention", "quantizer", "cache", "speculator")


class PlanError(ValueError):
    """The selected components cannot work together; the message lists every reason."""


@dataclass(frozen=True)
class SelectedComponent:
    slot: str
    name: str
    plugin: str
    distribution: str | None
    version: str | None
    spec: ComponentSpec
    options: BaseModel | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.version,
            "factory": self.spec.factory if isinstance(self.spec.factory, str) else repr(self.spec.factory),
            "options": self.options.model_dump(mode="json") if self.options is not None else {},
            "capabilities": self.spec.capabilities.to_dict(),
        }


@dataclass(frozen=True)
class GraphDecision:
    phase: str
    enabled: bool
    mode: str  #: auto | off | require (from config)
    reasons: tuple[str, ...] = ()  #: why not (or notes when enabled), each "who: why"
    #: what the captured step must produce besides logits (hidden states, per-position states)
    needs: tuple[str, ...] = ()
    max_batch: int | None = None  #: cap from graph_capture_eligibility verdicts
    #: the ladder captured when enabled: decode batch sizes, or prefill token counts
    sizes: tuple[int, ...] = ()
    #: decode graphs: query tokens per request of each captured size (1 = decode, q > 1 = verify)
    tokens_per_request: tuple[int, ...] = ()
    #: prefill graphs: live requests one captured step holds (mixed steps included)
    max_requests: int | None = None

    def describe(self) -> str:
        state = "on" if self.enabled else "off"
        line = f"{self.phase} graph: {state}"
        if self.enabled and self.sizes:
            what = "batch sizes" if self.phase == "decode" else "token counts"
            line += f", {what} {', '.join(map(str, self.sizes))}"
            if self.tokens_per_request:
                tokens = " or ".join(map(str, self.tokens_per_request))
                line += f" x {tokens} token{'s' if self.tokens_per_request != (1,) else ''} per request"
            if self.max_requests is not None:
                line += f" (up to {self.max_requests} requests)"
        if self.reasons:
            line += ", because " + "; ".join(self.reasons)
        if self.enabled and self.max_batch is not None:
            line += f" (max batch {self.max_batch})"
        if self.enabled and self.needs:
            line += f" (captures {', '.join(self.needs)})"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "mode": self.mode, "reasons": list(self.reasons),
                "needs": list(self.needs), "max_batch": self.max_batch, "sizes": list(self.sizes),
                "tokens_per_request": list(self.tokens_per_request),
                "max_requests": self.max_requests}


@dataclass(frozen=True)
class ResolvedPlan:
    config: EngineConfig
    device: str
    dtype: str  #: resolved (never "auto")
    attention: SelectedComponent
    quantizer: SelectedComponent
    cache: SelectedComponent
    speculator: SelectedComponent | None
    #: phase -> decision; empty while validate_plan / graph_capture_eligibility impls run
    graphs: Mapping[str, GraphDecision] = field(default_factory=lambda: MappingProxyType({}))
    #: how an ``auto`` choice was made (``hinge.plugins.auto_attention``), one line each
    notes: tuple[str, ...] = ()
    #: the decode-phase attention backend (decode and verify steps) when it is not ``attention``
    #: (``attention_decode`` in config); None = ``attention`` runs every phase
    attention_decode: SelectedComponent | None = None

    def selected(self) -> list[SelectedComponent]:
        return [c for c in (self.attention, self.attention_decode, self.quantizer, self.cache,
                            self.speculator) if c]

    def attention_backends(self) -> list[SelectedComponent]:
        """The distinct attention backends, the prefill one first (they share one KV pool)."""
        return [c for c in (self.attention, self.attention_decode) if c is not None]

    def attention_for(self, phase: str) -> SelectedComponent:
        """The attention backend of a batch phase: ``prefill`` and ``mixed`` steps run
        ``attention``; ``decode``, ``verify`` (and ``draft``) steps ``attention_decode`` when set."""
        if phase in ("decode", "verify", "draft") and self.attention_decode is not None:
            return self.attention_decode
        return self.attention

    def components_for(self, phase: str) -> list[SelectedComponent]:
        """Components that run inside a step of graph phase ``phase`` (the drafter uses the
        decode attention backend)."""
        attn = self.attention_for(phase)
        if phase == "draft":
            return [c for c in (self.speculator, attn) if c is not None]
        return [c for c in (attn, self.quantizer, self.cache, self.speculator) if c]

    def build_context(self, model_config: Any = None) -> BuildContext:
        import torch

        return BuildContext(
            device=self.device,
            dtype=getattr(torch, self.dtype),
            deterministic=self.config.deterministic,
            page_size=self.config.page_size,
            model_config=model_config,
        )

    def _build(self, component: SelectedComponent, build: BuildContext) -> Any:
        try:
            factory = component.spec.load_factory()
        except (ImportError, AttributeError) as exc:
            raise PlanError(
                f"{KIND_LABELS[component.slot]} {component.name!r} of plugin {component.plugin!r} "
                f"(distribution {component.distribution}) cannot be built: its factory "
                f"{component.spec.factory!r} failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        return factory(component.options, build)

    def build_attention(self, build: BuildContext) -> Any:
        """The attention backend of prefill and mixed steps (of every step without a split)."""
        return self._build(self.attention, build)

    def build_attention_decode(self, build: BuildContext) -> Any:
        """The decode-phase backend when the plan has its own (None: use ``build_attention``'s)."""
        return None if self.attention_decode is None else self._build(self.attention_decode, build)

    def build_quantizer(self, build: BuildContext) -> Any:
        return self._build(self.quantizer, build)

    def build_cache(self, build: BuildContext) -> Any:
        return self._build(self.cache, build)

    def build_speculator(self, build: BuildContext) -> Any:
        return None if self.speculator is None else self._build(self.speculator, build)

    def describe(self) -> list[str]:
        lines = [f"device: {self.device}, dtype: {self.dtype}"]
        for slot in SLOTS:
            c = getattr(self, slot)
            if c is None:
                lines.append(f"{slot}: (none)")
                continue
            label = "attention (prefill, mixed)" if slot == "attention" and self.attention_decode else slot
            lines.append(f"{label}: {_component_line(c)}")
            if slot == "attention" and self.attention_decode is not None:
                lines.append(f"attention (decode, verify): {_component_line(self.attention_decode)}")
        lines.append(f"page_size: {self.config.page_size}")
        lines.extend(self.notes)
        lines.extend(self.graphs[p].describe() for p in GRAPH_PHASES if p in self.graphs)
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "deterministic": self.config.deterministic,
            "page_size": self.config.page_size,
            **{s: (getattr(self, s).to_dict() if getattr(self, s) else None) for s in SLOTS},
            "attention_decode": self.attention_decode.to_dict() if self.attention_decode else None,
            "graphs": {p: d.to_dict() for p, d in self.graphs.items()},
            "notes": list(self.notes),
        }


def _component_line(c: SelectedComponent) -> str:
    opts = c.options.model_dump(mode="json") if c.options is not None else {}
    where = f"plugin {c.plugin}" + (
        f", distribution {c.distribution} {c.version or ''}".rstrip() if c.distribution else ""
    )
    return f"{c.name} ({where})" + (f" options {opts}" if opts else "")


def _select(pm: PluginManager, slot: str, name: str, options: dict[str, Any]) -> SelectedComponent:
    from hinge.plugins.manager import PluginError

    try:
        record = pm.get_component(slot, name)
    except PluginError as exc:
        from hinge.config import DEFAULT_CACHE, MISSING_CACHE_HINT

        hint = f"\n{MISSING_CACHE_HINT}" if (slot, name) == ("cache", DEFAULT_CACHE) else ""
        raise PlanError(f"{exc}{hint}") from None
    return SelectedComponent(
        slot=slot,
        name=name,
        plugin=record.plugin,
        distribution=record.distribution,
        version=record.version,
        spec=record.spec,
        options=record.spec.validate_options(options),
    )


def resolve_plan(
    config: EngineConfig,
    pm: PluginManager | None = None,
    model_info: Any = None,
    *,
    device_capability: tuple[int, int] | None = None,
    model_votes: ModelVotes | None = None,
) -> ResolvedPlan:
    """Select, validate and decide graphs. Raises PlanError (or OptionsError) with every reason.

    :param pm: a loaded plugin manager; None = ``get_plugin_manager(config.plugins)``.
    :param model_info: what is known of the model without loading weights: a HF config dict, a
        ``ModelConfig`` (``.hf_config``), or None (then ``config.model``'s config.json is read).
    :param device_capability: CUDA compute capability; None = asked from torch on cuda.
    :param model_votes: the model's graph verdicts per phase (``hinge.models.graph_votes.
        model_votes``: recurrent kernels veto what they cannot capture); None = none asked.
    """
    from hinge.plugins.graphs import decide_graphs
    from hinge.plugins.manager import get_plugin_manager

    config = config.resolved()
    if pm is None:
        pm = get_plugin_manager(config.plugins)
    if config.attention == "auto":
        if config.attention_prefill and config.attention_decode:  # nothing left for auto
            config = config.model_copy(update={"attention": config.attention_prefill})
        else:
            from hinge.plugins.auto_attention import choose_attention

            return choose_attention(config, pm, lambda named: resolve_plan(
                named, pm, model_info, device_capability=device_capability, model_votes=model_votes))
    quantizer_name = resolve_quantizer_name(config, pm, model_info)
    prefill, decode = config.phase_attention("prefill"), config.phase_attention("decode")
    attention = _select(pm, "attention", *prefill)
    attention_decode = None if decode == prefill else _select(pm, "attention", *decode)
    quantizer = _select(pm, "quantizer", quantizer_name, config.quantizer_options)
    cache = _select(pm, "cache", config.cache, config.cache_options)
    speculator = None if config.speculator is None \
        else _select(pm, "speculator", config.speculator, config.speculator_options)
    config, page_note, reasons = _page_size(config, [c for c in (attention, attention_decode) if c],
                                            cache)
    plan = ResolvedPlan(
        config=config,
        device=config.device,
        dtype=config.resolved_dtype,
        attention=attention,
        quantizer=quantizer,
        cache=cache,
        speculator=speculator,
        notes=(page_note,) if page_note else (),
        attention_decode=attention_decode,
    )
    if device_capability is None and config.device == "cuda":
        device_capability = _cuda_capability()
    reasons += capability_reasons(plan, model_info, device_capability)
    for impl in pm.hook.validate_plan.get_hookimpls():
        try:
            found = impl.function(*[plan for _ in impl.argnames]) or []
        except Exception as exc:
            raise PlanError(
                f"plugin {impl.plugin_name!r}: validate_plan raised {type(exc).__name__}: {exc}"
            ) from exc
        reasons.extend(f"{impl.plugin_name}: {reason}" for reason in found)
    if reasons:
        raise PlanError(
            "the selected components cannot work together:\n  - " + "\n  - ".join(reasons)
            + "\nchange the selection or settings above; see `hinge plugins` for capabilities"
        )
    graphs = decide_graphs(plan, pm, model_info, model_votes)
    return dataclasses.replace(plan, graphs=MappingProxyType(graphs))


def _page_size(config: EngineConfig, attention: list[SelectedComponent], cache: SelectedComponent
               ) -> tuple[EngineConfig, str | None, list[str]]:
    """The page size the attention backends share (``hinge.plugins.kv_layout``), applied to
    ``config`` (a defaulted ``track_interval`` follows it)."""
    from hinge.config import DEVICE_DEFAULTS, ConfigError
    from hinge.plugins.kv_layout import choose_page_size

    default = DEVICE_DEFAULTS[config.device]["page_size"]
    page, note, reasons = choose_page_size(config, attention, cache, default=default)
    if page == config.page_size:
        return config, note, reasons
    try:
        return config.with_page_size(page).resolved(), note, reasons
    except ConfigError as exc:
        return config, note, [*reasons, f"{exc} (page_size {page} is the attention backends' choice)"]


def _cuda_capability() -> tuple[int, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]

