"""EngineConfig: every setting of an engine, from CLI > HINGE_* env > YAML > defaults.

``load_config(yaml_path, env, overrides)`` merges the sources and validates once; an error
names the field, where its value came from, what is allowed and what to change.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

GraphMode = Literal["auto", "off", "require"]


class ConfigError(ValueError):
    """The configuration is invalid; the message says which field, from where, and the fix."""


class PluginSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: load only these plugins (entry-point or distribution names); None = all installed
    allow: list[str] | None = None
    #: never load these plugins
    block: list[str] = Field(default_factory=list)
    #: any plugin failure is fatal (``--strict-plugins``)
    strict: bool = False

    @field_validator("allow", "block", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class GraphSettings(BaseModel):
    """Per phase: ``auto`` (graph when every component allows it), ``off``, or ``require``
    (a start-up error when anything vetoes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill: GraphMode = "auto"
    decode: GraphMode = "auto"
    draft: GraphMode = "auto"
    #: query tokens per request of the decode graphs: 1 is a decode step; q > 1 also captures the
    #: shape of a speculative verify (q tokens of every request after its prefix)
    tokens_per_request: tuple[int, ...] = (1,)

    @field_validator("tokens_per_request", mode="before")
    @classmethod
    def _token_counts(cls, value: Any) -> Any:
        values = [value] if isinstance(value, int) else list(value)
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise ValueError("must be one or more positive integers, e.g. [1] or [1, 4]")
        return tuple(sorted(set(values)))

    @field_validator("prefill", "decode", "draft", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        # YAML 1.1 reads `off` as False and `on` as True
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) else value


#: Per-device defaults of ``EngineConfig`` fields left unset (docs/internals.md): CPU steps stay
#: small so a 2-core machine interleaves decodes with prefill chunks; a GPU step of 8192 tokens
#: keeps the GEMMs large (sglang's and vLLM's default for big cards).
DEVICE_DEFAULTS: dict[str, dict[str, int]] = {
    "cpu": {"page_size": 16, "chunked_prefill_size": 512, "track_interval": 64},
    "cuda": {"page_size": 16, "chunked_prefill_size": 8192, "track_interval": 256},
}

#: the default prefix cache (plugin ``radix``, ``plugins/cache_radix`` of hinge-llm)
DEFAULT_CACHE = "radix"
#: added to the error when the default cache is selected but its plugin is not loaded
MISSING_CACHE_HINT = (
    "cache 'radix' (the default) is the prefix cache of the plugin 'radix' (hinge-llm's "
    "plugins/cache_radix, installed by `pip install -c constraints.txt -e .`; allowed by "
    "HINGE_PLUGINS when that is set); set cache=\"none\" (--cache none, HINGE_CACHE=none) to turn "
    "prefix caching off")


class EngineConfig(BaseModel):
    """The fields of docs/internals.md, flat; nested only for ``plugins`` and ``graphs``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    #: ``auto``: cuda when torch sees a GPU, else cpu (``resolved()`` decides)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    #: ``auto``: flashinfer on cuda when it imports and suits the model, else the torch
    #: reference (the plan decides and says why: ``hinge.plugins.auto_attention``)
    attention: str = "auto"
    attention_options: dict[str, Any] = Field(default_factory=dict)
    #: attention per phase (sglang's prefill/decode attention backends): prefill and mixed steps
    #: run ``attention_prefill``, decode and verify steps ``attention_decode``; None = ``attention``.
    #: Options: ``attention_<phase>_options``, else ``attention_options`` when the name is
    #: ``attention``'s
    attention_prefill: str | None = None
    attention_prefill_options: dict[str, Any] = Field(default_factory=dict)
    attention_decode: str | None = None
    attention_decode_options: dict[str, Any] = Field(default_factory=dict)
    quantizer: str = "auto"
    quantizer_options: dict[str, Any] = Field(default_factory=dict)
    speculator: str | None = None
    speculator_options: dict[str, Any] = Field(default_factory=dict)
    #: prefix cache policy; ``radix`` (the default) is the plugin of hinge-llm's
    #: plugins/cache_radix, ``none`` turns prefix caching off
    cache: str = DEFAULT_CACHE
    cache_options: dict[str, Any] = Field(default_factory=dict)
    #: hybrid models: recurrent-state checkpoints every this many tokens (a multiple of
    #: page_size); None = the device's default (``DEVICE_DEFAULTS``) rounded up to whole pages
    track_interval: int | None = Field(None, ge=1)
    #: hybrid models: state-pool slots kept for prefix-cache checkpoints (counted in the memory
    #: budget); None = 2 per running request, at most 10% of the KV+state budget
    checkpoint_slots: int | None = Field(None, ge=0)
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    graphs: GraphSettings = Field(default_factory=GraphSettings)
    deterministic: bool = False
    #: tokens per KV page; None = the device's default (``DEVICE_DEFAULTS``)
    page_size: int | None = Field(None, ge=1, le=4096)
    kv_cache_bytes: int | None = Field(None, gt=0)
    mem_fraction_static: float = Field(0.85, gt=0, le=1)
    max_running_requests: int = Field(64, ge=1)
    #: new tokens per step (decode included); <= 0 disables chunking; None = the device's default
    chunked_prefill_size: int | None = None
    max_model_len: int | None = Field(None, ge=1)
    state_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    seed: int = Field(0, ge=0)
    #: ``auto`` reads the checkpoint; ``dummy`` only its config.json, with seeded random weights
    #: (benchmarks of real shapes without the weights)
    load_format: Literal["auto", "dummy"] = "auto"
    #: start-up warm-up requests that compile every kernel before the first request
    #: (hinge.engine.warmup); ``auto`` = on CUDA only
    warmup: Literal["auto", "on", "off"] = "auto"
    #: the start-up heap frozen out of the garbage collector's passes once the engine has
    #: started (hinge.engine.gc_freeze); ``auto`` = on CUDA only
    gc_freeze: Literal["auto", "on", "off"] = "auto"
    #: torch intra-op threads on CPU; None (or "auto") = chosen at start (hinge.threads)
    cpu_threads: int | None = Field(None, ge=1)
    #: fields ``resolved()`` filled from ``DEVICE_DEFAULTS``, with the value it filled in
    _defaults: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("model", mode="before")
    @classmethod
    def _model_path(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    @field_validator("cpu_threads", mode="before")
    @classmethod
    def _auto_threads(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip().lower() == "auto" else value

    @field_validator("speculator", mode="before")
    @classmethod
    def _no_speculator(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "none", "off"):
            return None
        return value

    @field_validator("graphs", mode="before")
    @classmethod
    def _graphs_shorthand(cls, value: Any) -> Any:
        # `graphs: off` sets every phase
        if isinstance(value, str) or value is False:
            mode = "off" if value is False else value
            return {"prefill": mode, "decode": mode, "draft": mode}
        return value

    @field_validator("attention", "quantizer", "cache")
    @classmethod
    def _component_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a component (see `hinge plugins`)")
        return value.strip()

    @field_validator("attention_prefill", "attention_decode", mode="before")
    @classmethod
    def _phase_attention(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            if value.lower() in ("", "none", "null"):
                return None
            if value == "auto":
                raise ValueError("per-phase attention names a backend; leave it unset to use "
                                 "`attention` (which may be auto)")
        return value

    def phase_attention(self, phase: str) -> tuple[str, dict[str, Any]]:
        """(backend name, options) for ``prefill`` (prefill and mixed steps) or ``decode``
        (decode and verify steps); ``attention`` itself may still be ``auto``."""
        name = getattr(self, f"attention_{phase}") or self.attention
        options = getattr(self, f"attention_{phase}_options")
        if not options and name == self.attention:
            options = self.attention_options
        return name, dict(options)

    @property
    def page_size_is_default(self) -> bool:
        """``page_size`` was filled by ``resolved()`` from the device default (not set by the
        user), so the plan may pick one the attention backends prefer instead."""
        return self.page_size is None or self._defaults.get("page_size") == self.page_size

    def with_page_size(self, page_size: int) -> EngineConfig:
        """This resolved config with another page size (the plan's choice); a defaulted
        ``track_interval`` is re-rounded to whole pages of it."""
        update: dict[str, Any] = {"page_size": page_size}
        defaults = dict(self._defaults, page_size=page_size)
        if "track_interval" in self._defaults and self._defaults["track_interval"] == self.track_interval:
            base = DEVICE_DEFAULTS[self.device]["track_interval"] if self.device in DEVICE_DEFAULTS \
                else self.track_interval
            update["track_interval"] = defaults["track_interval"] = -(-base // page_size) * page_size
        out = self.model_copy(update=update)
        out._defaults = defaults
        return out

    def resolved(self) -> EngineConfig:
        """This config with every per-device default decided: ``device`` (auto -> cuda when torch
        sees a GPU), ``page_size`` and ``chunked_prefill_size`` (``DEVICE_DEFAULTS``)."""
        device = self.device
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        defaults = DEVICE_DEFAULTS[device]
        update: dict[str, Any] = {"device": device}
        for name in ("page_size", "chunked_prefill_size"):
            if getattr(self, name) is None:
                update[name] = defaults[name]
        page = update.get("page_size", self.page_size)
        if self.track_interval is None:
            update["track_interval"] = -(-defaults["track_interval"] // page) * page
        elif self.track_interval % page:
            raise ConfigError(
                f"track_interval {self.track_interval} is not a multiple of page_size {page}: "
                "recurrent-state checkpoints sit at page boundaries; set track_interval to a "
                f"multiple of {page} (e.g. {-(-self.track_interval // page) * page})")
        out = self.model_copy(update=update)
        # NOTE: which values came from defaults (a field still holding that value is not the
        # user's choice): the plan may replace a defaulted page size (``with_page_size``)
        out._defaults = {**self._defaults, **{k: v for k, v in update.items() if k != "device"}}
        return out

    def on_by_device(self, name: str) -> bool:
        """Setting ``name`` of ``on`` / ``off`` / ``auto`` (``warmup``, ``gc_freeze``): on, or
        ``auto`` on CUDA (what CUDA's start-up needs and a CPU engine, often one of many in a
        test's process, does not)."""
        value = getattr(self, name)
        return value == "on" or (value == "auto" and self.device == "cuda")

    @property
    def resolved_dtype(self) -> str:
        """``auto`` -> float32 on cpu, bfloat16 on cuda (weights and activations; logits, sampling
        and the recurrent state stay float32)."""
        if self.dtype != "auto":
            return self.dtype
        if self.device == "auto":
            return self.resolved().resolved_dtype
        return "float32" if self.device == "cpu" else "bfloat16"

    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.resolved_dtype)


# -------------------------------------------------------------------------------------------------
# loading: defaults < YAML < HINGE_* env < overrides (CLI)
# -------------------------------------------------------------------------------------------------

_DICT_FIELDS = {"attention_options", "quantizer_options", "speculator_options", "cache_options",
                "attention_prefill_options", "attention_decode_options"}
_ENV_SPECIAL = {
    "HINGE_PLUGINS": ("plugins", "allow"),
    "HINGE_PLUGINS_BLOCK": ("plugins", "block"),
    "HINGE_STRICT_PLUGINS": ("plugins", "strict"),
    "HINGE_GRAPHS_PREFILL": ("graphs", "prefill"),
    "HINGE_GRAPHS_DECODE": ("graphs", "decode"),
    "HINGE_GRAPHS_DRAFT": ("graphs", "draft"),
}
_NULLABLE = {"model", "speculator", "kv_cache_bytes", "max_model_len", "cpu_threads",
             "track_interval", "checkpoint_slots", "attention_prefill", "attention_decode"}


def env_settings(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """HINGE_<FIELD> variables as a nested dict, plus the variable each field came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for var, raw in env.items():
        if var in _ENV_SPECIAL:
            group, key = _ENV_SPECIAL[var]
            values.setdefault(group, {})[key] = raw
            sources[f"{group}.{key}"] = var
            continue
        if not var.startswith("HINGE_"):
            continue
        name = var[len("HINGE_"):].lower()
        if name not in EngineConfig.model_fields or name in ("plugins", "graphs"):
            continue  # other HINGE_* variables belong to other tools (e.g. the test suite)
        if name in _DICT_FIELDS or name in ("plugins", "graphs"):
            try:
                values[name] = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{var} must be a JSON object, got {raw!r}: {exc}") from None
        elif name in _NULLABLE and raw.strip().lower() in ("", "none", "null"):
            values[name] = None
        else:
            values[name] = raw
        sources[name] = var
    return values, sources


def _merge(base: dict[str, Any], update: Mapping[str, Any], source: str, sources: dict[str, str],
           prefix: str = "") -> None:
    for key, value in update.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(base.get(key), dict) and key not in _DICT_FIELDS:
            _merge(base[key], value, source, sources, prefix=f"{path}.")
            continue
        base[key] = dict(value) if isinstance(value, Mapping) else value
        sources[path] = source


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    known = sorted(EngineConfig.model_fields)
    for key in data:
        if key not in EngineConfig.model_fields:
            hint = difflib.get_close_matches(str(key), known, n=1)
            raise ConfigError(
                f"unknown config key {key!r} in {source}"
                + (f"; did you mean {hint[0]!r}?" if hint else "")
                + f"; known keys: {', '.join(known)}"
            )


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass an existing YAML file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings, got {type(data).__name__}")
    return data


def load_config(
    yaml_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> EngineConfig:
    """Merge defaults < YAML < ``HINGE_*`` env < ``overrides`` (CLI flags) into one EngineConfig.

    :param env: the environment to read (``os.environ`` when None; ``{}`` to ignore it).
    :param overrides: flat field -> value (nested dicts for ``plugins``/``graphs``); a value of
        None means "not given" and is skipped (use ``speculator="none"`` to turn speculation off).
    """
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if yaml_path is not None:
        yaml_data = load_yaml(yaml_path)
        _check_keys(yaml_data, str(yaml_path))
        _merge(data, yaml_data, str(yaml_path), sources)
    env_values, env_sources = env_settings(env)
    _merge(data, env_values, "env", sources)
    sources.update(env_sources)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    _check_keys(given, "overrides")
    _merge(data, given, "command line", sources)
    return validate_config(data, sources)


def validate_config(data: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> EngineConfig:
    """``EngineConfig.model_validate`` with one readable line per problem."""
    sources = sources or {}
    try:
        return EngineConfig.model_validate(dict(data))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
            field = loc.split(".")[0]
            origin = sources.get(loc) or sources.get(field)
            where = f" (from {origin})" if origin else ""
            got = f"; got {err['input']!r}" if "input" in err and not isinstance(err["input"], dict) else ""
            lines.append(f"{loc}{where}: {err['msg']}{got}")
        raise ConfigError("invalid hinge config:\n  " + "\n  ".join(lines)) from None
