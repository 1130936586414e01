"""Plan checks from declared capabilities: device, dtype, compute capability, availability on
this machine, the phases each attention backend runs, KV layout, deterministic mode, and what
the model needs (sliding window, head dim, logit softcap, recurrent layers).

Each check returns reasons (strings a user can act on), never raises: the plan joins them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hinge.plugins.kv_layout import layout_reasons
from hinge.plugins.specs import KIND_LABELS

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.plugins.manager import PluginManager
    from hinge.plugins.plan import ResolvedPlan

RECURRENT_LAYER_TYPES = ("linear_attention", "conv", "mamba")


def _label(c: Any) -> str:
    return f"{KIND_LABELS[c.slot]} {c.name!r} ({c.plugin})"


def model_dict(config: EngineConfig, model_info: Any) -> dict[str, Any]:
    """What is known of the model as a HF config dict (text part of composite configs)."""
    if model_info is None:
        if config.model is not None:
            path = Path(config.model)
        else:
            from hinge import default_model_path

            try:
                path = Path(default_model_path())
            except FileNotFoundError:  # reported by the model loader, with its fix
                return {}
        info: Any = _read_json(path / "config.json") or {}
        quant = _read_json(path / "hf_quant_config.json")
        if quant and "quantization_config" not in info:
            info = {**info, "hf_quant_config": quant}
    elif isinstance(model_info, dict):
        info = model_info
    elif hasattr(model_info, "hf_config"):
        hf = model_info.hf_config
        info = hf.to_dict() if hasattr(hf, "to_dict") else dict(vars(hf))
    elif hasattr(model_info, "to_dict"):
        info = model_info.to_dict()
    else:
        info = dict(vars(model_info))
    text = info.get("text_config")
    if isinstance(text, dict):
        info = {**info, **text}
    return info


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def quant_config_methods(quant_config: dict[str, Any] | None) -> set[str]:
    """``quant_method`` / ``quant_algo`` / ``format`` values of one quantization dict, lowercase:
    config.json's ``quantization_config`` (compressed-tensors names its layout in ``format``,
    e.g. ``nvfp4-pack-quantized``) or modelopt's ``hf_quant_config.json`` (which adds ``modelopt``)."""
    methods: set[str] = set()
    if not isinstance(quant_config, dict):
        return methods
    for key in ("quant_method", "quant_algo", "format"):
        if isinstance(quant_config.get(key), str):
            methods.add(quant_config[key].lower())
    modelopt = quant_config.get("quantization")
    if isinstance(modelopt, dict):
        methods.add("modelopt")
        if isinstance(modelopt.get("quant_algo"), str):
            methods.add(modelopt["quant_algo"].lower())
    return methods


def checkpoint_quant_methods(info: dict[str, Any]) -> set[str]:
    """``quant_method`` / ``quant_algo`` values of a checkpoint, lowercase; empty = unquantized."""
    return (quant_config_methods(info.get("quantization_config"))
            | quant_config_methods(info.get("hf_quant_config")))


def quantizer_claims(capabilities: Any, methods: set[str]) -> bool:
    """THE rule for which quantizer loads a checkpoint (``quantizer = auto``, the model loader and
    ``Quantizer.claims`` all ask it): an unquantized checkpoint (no methods) if the quantizer
    declares ``claims_unquantized``, a quantized one if it declares one of its methods."""
    if not methods:
        return bool(capabilities.claims_unquantized)
    return bool(methods & set(capabilities.checkpoint_methods))


def resolve_quantizer_name(config: EngineConfig, pm: PluginManager, model_info: Any) -> str:
    """``quantizer = auto``: the one quantizer that claims the checkpoint (``quantizer_claims``),
    else ``none`` for an unquantized checkpoint."""
    from hinge.plugins.plan import PlanError

    if config.quantizer != "auto":
        return config.quantizer
    methods = checkpoint_quant_methods(model_dict(config, model_info))
    if not methods:
        return "none"
    claimants = sorted(
        name for name, rec in pm.components["quantizer"].items()
        if quantizer_claims(rec.spec.capabilities, methods)
    )
    if len(claimants) == 1:
        return claimants[0]
    if not claimants:
        raise PlanError(
            f"the checkpoint is quantized ({', '.join(sorted(methods))}) and no installed quantizer "
            f"claims it; installed quantizers: {', '.join(pm.names('quantizer'))}; install the "
            "plugin for this format (see `hinge plugins`) or set quantizer explicitly"
        )
    raise PlanError(
        f"quantizers {', '.join(claimants)} all claim this checkpoint ({', '.join(sorted(methods))}); "
        "choose one with quantizer=<name>"
    )


def capability_reasons(
    plan: ResolvedPlan, model_info: Any, device_capability: tuple[int, int] | None
) -> list[str]:
    config = plan.config
    reasons: list[str] = []
    for c in plan.selected():
        caps = c.spec.capabilities
        if plan.device not in caps.devices:
            reasons.append(
                f"{_label(c)} does not run on {plan.device}; it supports {', '.join(sorted(caps.devices))}"
            )
        if c.slot != "cache" and plan.dtype not in caps.dtypes:
            reasons.append(
                f"{_label(c)} does not support dtype {plan.dtype}; it supports "
                f"{', '.join(sorted(caps.dtypes))} (set dtype)"
            )
        need = caps.min_compute_capability
        if plan.device == "cuda" and need and device_capability and tuple(device_capability) < need:
            reasons.append(
                f"{_label(c)} needs CUDA compute capability >= {need[0]}.{need[1]}, this GPU has "
                f"{device_capability[0]}.{device_capability[1]}"
            )
        if config.deterministic and c.slot in ("attention", "quantizer") and not caps.batch_invariant:
            reasons.append(
                f"deterministic = true but {_label(c)} is not batch invariant; select one that "
                "is or set deterministic = false"
            )
    reasons.extend(availability_reasons(plan, device_capability))
    reasons.extend(_phase_reasons(plan))
    reasons.extend(layout_reasons(plan.dtype, plan.attention_backends()))
    multiple = plan.cache.spec.capabilities.page_size_multiple
    if config.page_size % multiple:
        reasons.append(f"{_label(plan.cache)} needs page_size to be a multiple of {multiple}")
    reasons.extend(_model_reasons(plan, model_info))
    return reasons


def availability_reasons(plan: ResolvedPlan, device_capability: tuple[int, int] | None) -> list[str]:
    """Each selected component's own availability check (``ComponentSpec.availability``), for
    components whose declared devices and compute capability already fit (those reasons come
    from the capability checks above)."""
    from hinge.plugins.availability import Machine, check_reason

    cuda = device_capability is not None if plan.device == "cuda" else _torch_sees_cuda()
    machine = Machine(plan.device, cuda, tuple(device_capability) if device_capability else None)
    reasons = []
    for c in plan.selected():
        caps = c.spec.capabilities
        need = caps.min_compute_capability
        if plan.device not in caps.devices or (
                plan.device == "cuda" and need and device_capability and tuple(device_capability) < need):
            continue
        why = check_reason(c.spec, machine)
        if why:
            reasons.append(f"{_label(c)} cannot run here: {why}")
    return reasons


def _torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _phase_reasons(plan: ResolvedPlan) -> list[str]:
    """Each attention backend claims the batches it is given: prefill and mixed steps for
    ``attention``, decode (and verify, with q > 1 graphs) for the decode-phase backend; one
    backend per phase under ``deterministic`` (a prefill row and a decode row of the same token
    must give the same bits, invariant 3)."""
    reasons = []
    verify = max(plan.config.graphs.tokens_per_request) > 1 or plan.speculator is not None
    decode_needs = {"decode", "verify"} if verify else {"decode"}
    if plan.attention_decode is None:
        wants = [(plan.attention, {"prefill", "mixed"} | decode_needs)]
    else:
        wants = [(plan.attention, {"prefill", "mixed"}), (plan.attention_decode, decode_needs)]
        if plan.config.deterministic and plan.attention_decode.name != plan.attention.name:
            reasons.append(
                f"deterministic = true needs one attention backend for every phase (a prefill row "
                f"and a decode row must give the same bits), but prefill runs "
                f"{plan.attention.name!r} and decode {plan.attention_decode.name!r}; unset "
                "attention_prefill / attention_decode or set deterministic = false")
    for c, phases in wants:
        missing = sorted(phases - set(c.spec.capabilities.phases))
        if missing:
            reasons.append(f"{_label(c)} does not run {', '.join(missing)} batches; select another "
                           "backend for that phase (attention_prefill / attention_decode)")
    return reasons


#: HF config keys holding an attention-logit softcap (Gemma 2 and its descendants, Grok-style)
SOFTCAP_KEYS = ("attn_logit_softcapping",)


def model_logit_softcap(info: Any) -> float | None:
    """The attention-logit softcap a model's HF config sets (``attn_logit_softcapping``), or
    None when it sets none (absent, null or 0). ``info``: a config dict or a config object."""
    for key in SOFTCAP_KEYS:
        value = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
        if value:
            return float(value)
    return None


def _model_reasons(plan: ResolvedPlan, model_info: Any) -> list[str]:
    try:
        info = model_dict(plan.config, model_info)
    except Exception:  # noqa: BLE001 - a model that cannot be read is reported by the loader
        return []
    reasons = []
    window = info.get("sliding_window")
    heads = info.get("num_attention_heads")
    head_dim = info.get("head_dim") or (info["hidden_size"] // heads if heads and info.get("hidden_size") else None)
    softcap = model_logit_softcap(info)
    for c in plan.attention_backends():
        attn = c.spec.capabilities
        if window and info.get("use_sliding_window", True) and not attn.sliding_window:
            reasons.append(f"the model uses a sliding window ({window}) and {_label(c)} "
                           "does not support one")
        if head_dim and attn.head_dims is not None and head_dim not in attn.head_dims:
            reasons.append(f"{_label(c)} does not support head_dim {head_dim}; it supports "
                           f"{', '.join(map(str, sorted(attn.head_dims)))}")
        if softcap and not attn.logit_softcap:
            reasons.append(f"the model caps attention logits (attn_logit_softcapping = {softcap}) and "
                           f"{_label(c)} does not support a logit softcap; select one that does")
    layer_types = info.get("layer_types") or []
    hybrid = any(t in RECURRENT_LAYER_TYPES for t in layer_types)
    cache = plan.cache.spec.capabilities
    if hybrid and cache.prefix_sharing and not cache.recurrent_state:
        reasons.append(f"the model has recurrent layers and {_label(plan.cache)} cannot store "
                       "their state checkpoints; select a cache policy that can, or cache=none")
    return reasons
