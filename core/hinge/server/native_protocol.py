"""sglang's native request models: ``GenerateReqInput`` and its ``SamplingParams``.

Every field sglang's clients send is known here; null means the default, as in sglang. Fields
hinge implements are validated and honoured. The others (LoRA, images, sessions, disaggregation,
...) are accepted when neutral (null, false, 0, empty, or a list of those) and refused with a
400 naming the field when used. Unknown fields are an error, as in sglang.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from hinge.sampling_params import Grammar, SamplingParams
from hinge.server.protocol import (
    Finite,
    RepetitionPenalty,
    Seed,
    Stop,
    TokenId,
    TopK,
    parse_logit_bias,
)

_STRICT_FORBID = ConfigDict(strict=True, extra="forbid")

#: sampling_params fields of sglang that hinge does not do: accepted when neutral only
SAMPLING_NEUTRAL_ONLY = ("structural_tag", "custom_params", "beam_width")
#: GenerateReqInput fields of sglang that hinge does not do: accepted when neutral only
GENERATE_NEUTRAL_ONLY = (
    "input_embeds", "image_data", "video_data", "audio_data", "mm_hashes", "mm_content_hashes",
    "modalities", "use_audio_in_video", "video_config", "images_config", "min_dynamic_patch",
    "max_dynamic_patch", "image_max_dynamic_patch", "video_max_dynamic_patch", "session_id",
    "session_params", "priority", "routing_key", "conversation_id",
    "custom_labels", "background", "require_reasoning", "max_thinking_tokens",
    "token_ids_logprob", "return_sampling_mask", "return_flat_raw_top_logprobs",
    "return_flat_raw_top_logprobs_b64", "return_prompt_token_ids", "return_entropy",
    "return_hidden_states", "return_routed_experts", "routed_experts_start_len",
    "return_indexer_topk", "lora_path", "lora_id", "custom_logit_processor",
    "positional_embed_overrides", "bootstrap_host", "bootstrap_port", "bootstrap_room",
    "bootstrap_pair_key", "decode_tp_size", "routed_dp_rank", "data_parallel_rank",
    "disagg_prefill_dp_rank", "kv_router_hint", "http_worker_ipc", "need_wait_for_mm_inputs",
    "num_items_assigned", "encoder_urls", "multi_item_delimiter_indices", "return_bytes",
    "received_time", "external_trace_header",
)


def is_neutral(value: Any) -> bool:
    """null, false, 0, an empty string/list/dict, or a list of neutral values."""
    if value is None or value is False or (isinstance(value, (int, float)) and value == 0):
        return True
    if isinstance(value, (str, dict)) and not value:
        return True
    return isinstance(value, list) and all(is_neutral(v) for v in value)


def _refuse_used(model: BaseModel, names: tuple[str, ...], where: str) -> None:
    used = [n for n in names if not is_neutral(getattr(model, n, None))]
    if used:
        raise ValueError(f"{where}{used[0]} is not supported by hinge (send null or leave it "
                         f"out); the fields hinge does not do are accepted only when neutral")


class _NativeSampling(BaseModel):
    model_config = _STRICT_FORBID

    max_new_tokens: int | None = Field(None, ge=0, le=2**31 - 1)
    min_new_tokens: int | None = Field(None, ge=0, le=2**31 - 1)
    n: int | None = Field(None, ge=1, le=64)
    temperature: Finite | None = Field(None, ge=0)
    top_p: Finite | None = Field(None, gt=0, le=1)
    top_k: TopK | None = None
    min_p: Finite | None = Field(None, ge=0, le=1)
    repetition_penalty: RepetitionPenalty | None = None
    frequency_penalty: Finite | None = Field(None, ge=-2, le=2)
    presence_penalty: Finite | None = Field(None, ge=-2, le=2)
    seed: Seed | None = None
    sampling_seed: Seed | None = None
    stop: Stop = None
    stop_token_ids: list[TokenId] | None = None
    stop_regex: Stop = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    no_stop_trim: bool | None = None
    logit_bias: dict[str, Finite] | None = None
    json_schema: str | dict[str, Any] | None = None
    regex: str | None = None
    ebnf: str | None = None
    stream_interval: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _checks(self) -> _NativeSampling:
        _refuse_used(self, SAMPLING_NEUTRAL_ONLY, "sampling_params.")
        given = [k for k in ("json_schema", "regex", "ebnf") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"sampling_params: give at most one of json_schema, regex and ebnf "
                             f"(got {', '.join(given)})")
        if self.stream_interval not in (None, 1):
            raise ValueError("sampling_params.stream_interval: hinge streams every token; send "
                             "1 or leave it out")
        return self

    def grammar(self) -> Grammar | None:
        if self.json_schema is not None:
            if self.json_schema == "$$ANY$$":  # sglang: any JSON value (the empty schema)
                return Grammar("json_schema", "{}")
            return Grammar("json_schema", dumps_schema(self.json_schema))
        if self.regex is not None:
            return Grammar("regex", self.regex)
        if self.ebnf is not None:
            return Grammar("ebnf", self.ebnf)
        return None


NativeSamplingParams = create_model(
    "NativeSamplingParams", __base__=_NativeSampling,
    **{name: (Any, None) for name in SAMPLING_NEUTRAL_ONLY})


class _Generate(BaseModel):
    """sglang's ``GenerateReqInput``: one prompt or a batch (``text`` or ``input_ids``)."""

    model_config = _STRICT_FORBID

    text: str | list[str] | None = None
    input_ids: list[TokenId] | list[list[TokenId]] | None = None
    sampling_params: NativeSamplingParams | list[NativeSamplingParams] | None = None  # type: ignore[valid-type]
    rid: str | list[str] | None = None
    stream: bool | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = Field(None, ge=-1, le=2**31 - 1)
    top_logprobs_num: int | None = Field(None, ge=0, le=20)
    return_text_in_logprobs: bool | None = None
    #: prefix-cache namespaces (both given: both count); see SamplingParams.cache_salt
    extra_key: str | None = None
    cache_salt: str | None = None
    log_metrics: bool | None = None  #: server-side logging only
    no_logs: bool | None = None  #: server-side logging only

    @model_validator(mode="after")
    def _checks(self) -> _Generate:
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give exactly one of `text` or `input_ids`")
        _refuse_used(self, GENERATE_NEUTRAL_ONLY, "")
        return self

    @property
    def wants_logprobs(self) -> bool:
        return bool(self.return_logprob)

    @property
    def start_len(self) -> int:
        return -1 if self.logprob_start_len is None else self.logprob_start_len

    @property
    def top_num(self) -> int:
        return self.top_logprobs_num or 0


GenerateRequest = create_model(
    "GenerateRequest", __base__=_Generate,
    **{name: (Any, None) for name in GENERATE_NEUTRAL_ONLY})


def native_sampling_params(sp: Any, req: Any, prompt_len: int) -> SamplingParams:
    """One prompt's ``SamplingParams`` from sglang's fields (null = sglang's default).

    Logprobs: ``input_token_logprobs`` cover ``prompt[start:]`` with entry 0 null (sglang's
    layout), so the engine computes prompt logprobs from ``start + 1`` on; ``start`` is
    ``logprob_start_len`` or, for -1, the last prompt position (output logprobs only)."""
    sp = sp or NativeSamplingParams()
    start = req.start_len if req.start_len >= 0 else prompt_len - 1
    if req.wants_logprobs and start >= prompt_len:
        raise ValueError(f"logprob_start_len ({start}) must be lower than the number of prompt "
                         f"tokens ({prompt_len})")
    prompt_start = start + 1 if req.wants_logprobs and start + 1 < prompt_len else None
    seed = sp.seed if sp.seed is not None else sp.sampling_seed
    fields = dict(
        max_new_tokens=_default(sp.max_new_tokens, 128), min_new_tokens=sp.min_new_tokens or 0,
        temperature=_default(sp.temperature, 1.0), top_p=_default(sp.top_p, 1.0),
        top_k=_default(sp.top_k, -1), min_p=_default(sp.min_p, 0.0),
        repetition_penalty=_default(sp.repetition_penalty, 1.0),
        frequency_penalty=_default(sp.frequency_penalty, 0.0),
        presence_penalty=_default(sp.presence_penalty, 0.0), seed=seed, stop=sp.stop,
        stop_token_ids=list(sp.stop_token_ids or []), stop_regex=sp.stop_regex,
        ignore_eos=bool(sp.ignore_eos), skip_special_tokens=_default(sp.skip_special_tokens, True),
        spaces_between_special_tokens=_default(sp.spaces_between_special_tokens, True),
        no_stop_trim=bool(sp.no_stop_trim), logit_bias=parse_logit_bias(sp.logit_bias),
        grammar=sp.grammar(), logprobs=req.wants_logprobs, cache_salt=_salt(req),
        top_logprobs=req.top_num if req.wants_logprobs else 0,
        prompt_logprobs_start=prompt_start,
        prompt_top_logprobs=req.top_num if prompt_start is not None else 0)
    return SamplingParams(**fields)


def _salt(req: Any) -> str | None:
    parts = [p for p in (req.extra_key, req.cache_salt) if p]
    return "\x00".join(parts) if parts else None


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def dumps_schema(schema: Any) -> str:
    """A JSON schema as text (clients send it as a string or, from some SDKs, as an object)."""
    return schema if isinstance(schema, str) else json.dumps(schema)
