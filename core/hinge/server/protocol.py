"""Request models of the HTTP API (pydantic, strict types, finite numbers).

The native ``/generate`` models (``hinge.server.native_protocol``) forbid unknown fields (a
misspelled sampling parameter is an error, as in sglang). The OpenAI models ignore unknown
fields, as vLLM and sglang do, so clients that send newer OpenAI parameters keep working; every
parameter declared here is honoured or refused with a 400 (``NEUTRAL_ONLY``), never ignored.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hinge.sampling_params import Grammar, SamplingParams

Finite = Annotated[float, Field(allow_inf_nan=False)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TopK = Annotated[int, Field(ge=-1, le=2**31 - 1)]
#: sglang's range, narrowed away from 0: a penalty of 1e-190 overflows the logits to inf.
RepetitionPenalty = Annotated[float, Field(ge=0.01, le=2.0, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
Stop = str | list[str] | None

_STRICT_IGNORE = ConfigDict(strict=True, extra="ignore")

#: OpenAI parameters hinge does not do: accepted when null/empty/false, else a 400 naming them
NEUTRAL_ONLY = ("audio", "prediction", "web_search_options", "functions", "function_call",
                "suffix", "reasoning_effort", "store", "metadata")
#: ``service_tier`` values that ask for nothing hinge does not do
NEUTRAL_SERVICE_TIERS = (None, "auto", "default")


def parse_logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    """OpenAI's ``{"token id": bias}`` (JSON keys are strings) -> ``{id: bias}``."""
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise ValueError(f"logit_bias keys must be token ids, got {key!r}") from None
        if token < 0 or not -100 <= value <= 100:
            raise ValueError(f"logit_bias {key!r}: {value}: ids must be >= 0 and biases in "
                             "[-100, 100]")
        out[token] = float(value)
    return out


class AbortRequest(BaseModel):
    model_config = _STRICT_IGNORE
    rid: str


# OpenAI


class StreamOptions(BaseModel):
    model_config = _STRICT_IGNORE
    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = _STRICT_IGNORE
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs`` (and its older ``guided_*`` fields)."""

    model_config = _STRICT_IGNORE
    json_: str | dict[str, Any] | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None


class _OpenAISampling(BaseModel):
    """Fields shared by completions and chat; the last groups are vLLM/sglang extensions.

    Unknown fields are kept (``extra="allow"``) only so that ``unsupported`` can name them in a
    400, as OpenAI does: a misspelled parameter is never silently ignored."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=0, le=2**31 - 1)
    temperature: Finite = Field(1.0, ge=0, le=2)
    top_p: Finite = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Stop = None
    seed: Seed | None = None
    frequency_penalty: Finite = Field(0.0, ge=-2, le=2)
    presence_penalty: Finite = Field(0.0, ge=-2, le=2)
    user: str | None = None
    top_k: TopK = -1
    min_p: Finite = Field(0.0, ge=0, le=1)
    repetition_penalty: RepetitionPenalty = 1.0
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    logit_bias: dict[str, Finite] | None = None
    min_tokens: int = Field(0, ge=0, le=2**31 - 1)
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    cache_salt: str | None = None  #: vLLM: a prefix-cache namespace (SamplingParams.cache_salt)
    # structured outputs: OpenAI's response_format, sglang's regex/ebnf/json_schema, vLLM's
    response_format: ResponseFormat | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_schema: str | dict[str, Any] | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    # accepted only when neutral (NEUTRAL_ONLY, NEUTRAL_SERVICE_TIERS)
    reasoning_effort: Any = None
    store: Any = None
    metadata: Any = None
    service_tier: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None

    def sampling_params(self, max_new_tokens: int, logprobs: bool, top_logprobs: int,
                        grammar: Grammar | None = None, **extra: Any) -> SamplingParams:
        """The engine's parameters; ``grammar`` overrides the request's own constraint and
        ``extra`` any other field (``skip_special_tokens`` when a parser reads the reply)."""
        fields: dict[str, Any] = dict(
            skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens)
        fields.update(extra)
        return SamplingParams(
            max_new_tokens=max_new_tokens, temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k, min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty,
            seed=self.seed, stop=self.stop, stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos, logprobs=logprobs, top_logprobs=top_logprobs,
            logit_bias=parse_logit_bias(self.logit_bias), min_new_tokens=self.min_tokens,
            no_stop_trim=self.include_stop_str_in_output, cache_salt=self.cache_salt,
            grammar=grammar if grammar is not None else self.grammar(), **fields)

    def unsupported(self) -> str | None:
        """Why hinge refuses this request's parameters (a field used that hinge does not do, or
        one it does not know), or None."""
        unknown = sorted(self.model_extra or {})
        if unknown:
            return (f"unknown field(s) {', '.join(f'`{n}`' for n in unknown)}; check the "
                    "spelling or leave them out")
        for name in NEUTRAL_ONLY:
            value = getattr(self, name, None)
            if value not in (None, False, "", [], {}):
                return f"`{name}` is not supported by hinge; leave it out"
        if self.service_tier not in NEUTRAL_SERVICE_TIERS:
            return (f"`service_tier` {self.service_tier!r} is not supported by hinge; use auto or "
                    "leave it out")
        return None

    def grammar(self) -> Grammar | None:
        """The structured-output constraint, from whichever field carries it (at most one)."""
        found: list[tuple[str, Grammar]] = []
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_object":
            found.append(("response_format", Grammar("json_object")))
        elif fmt is not None and fmt.type == "json_schema":
            if fmt.json_schema is None or fmt.json_schema.schema_ is None:
                raise ValueError("response_format json_schema needs json_schema.schema (a JSON "
                                 "schema object)")
            found.append(("response_format", Grammar("json_schema",
                                                     json.dumps(fmt.json_schema.schema_))))
        so = self.structured_outputs or StructuredOutputs()
        for name, value, kind in (
                ("regex", self.regex, "regex"), ("ebnf", self.ebnf, "ebnf"),
                ("json_schema", self.json_schema, "json_schema"),
                ("guided_json", self.guided_json, "json_schema"),
                ("guided_regex", self.guided_regex, "regex"),
                ("guided_grammar", self.guided_grammar, "ebnf"),
                ("structured_outputs.json", so.json_, "json_schema"),
                ("structured_outputs.regex", so.regex, "regex"),
                ("structured_outputs.grammar", so.grammar, "ebnf")):
            if value is not None:
                found.append((name, Grammar(kind, value if isinstance(value, str)
                                            else json.dumps(value))))
        for name, choices in (("guided_choice", self.guided_choice),
                              ("structured_outputs.choice", so.choice)):
            if choices is not None:
                if not choices:
                    raise ValueError(f"{name} needs at least one choice")
                found.append((name, Grammar("regex", "|".join(map(re.escape, choices)))))
        if len(found) > 1:
            raise ValueError("give at most one structured-output constraint; got "
                             + ", ".join(name for name, _ in found))
        return found[0][1] if found else None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_OpenAISampling):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    max_tokens: int | None = Field(16, ge=0, le=2**31 - 1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    #: OpenAI: generate ``best_of`` per prompt and return the ``n`` with the highest mean logprob
    best_of: int | None = Field(None, ge=1, le=16)


class ChatMessage(BaseModel):
    """One message; ``content`` is checked by ``hinge.server.chat.render_messages`` (readable
    errors for a missing content or an unsupported part, not pydantic's)."""

    model_config = _STRICT_IGNORE
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(BaseModel):
    model_config = _STRICT_IGNORE
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(BaseModel):
    model_config = _STRICT_IGNORE
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(BaseModel):
    model_config = _STRICT_IGNORE
    name: str


class NamedToolChoice(BaseModel):
    model_config = _STRICT_IGNORE
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(_OpenAISampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0, le=2**31 - 1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    #: extra variables for the chat template (``enable_thinking``, ...)
    chat_template_kwargs: dict[str, Any] | None = None
    #: sglang: False keeps the reasoning in ``content`` even with a reasoning parser
    separate_reasoning: bool = True
    modalities: list[Literal["text"]] | None = None

    @property
    def max_new_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens
