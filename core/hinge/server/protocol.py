"""Request models of the HTTP API (pydantic, strict types, finite numbers).

The native ``/generate`` models forbid unknown fields (a misspelled sampling parameter is an
error, as in sglang). The OpenAI models ignore unknown fields, as vLLM and sglang do, so clients
that send newer OpenAI parameters keep working; the ones hinge implements are validated.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hinge.sampling_params import SamplingParams

Finite = Annotated[float, Field(allow_inf_nan=False)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TopK = Annotated[int, Field(ge=-1, le=2**31 - 1)]
#: sglang's range, narrowed away from 0: a penalty of 1e-190 overflows the logits to inf.
RepetitionPenalty = Annotated[float, Field(ge=0.01, le=2.0, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
Stop = str | list[str] | None

_STRICT_FORBID = ConfigDict(strict=True, extra="forbid")
_STRICT_IGNORE = ConfigDict(strict=True, extra="ignore")


class NativeSamplingParams(BaseModel):
    model_config = _STRICT_FORBID

    max_new_tokens: int = Field(128, ge=0, le=2**31 - 1)
    temperature: Finite = Field(1.0, ge=0)
    top_p: Finite = Field(1.0, gt=0, le=1)
    top_k: TopK = -1
    min_p: Finite = Field(0.0, ge=0, le=1)
    repetition_penalty: RepetitionPenalty = 1.0
    frequency_penalty: Finite = Field(0.0, ge=-2, le=2)
    presence_penalty: Finite = Field(0.0, ge=-2, le=2)
    seed: Seed | None = None
    stop: Stop = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False


class GenerateRequest(BaseModel):
    """sglang's ``GenerateReqInput``: one prompt or a batch (``text`` or ``input_ids``)."""

    model_config = _STRICT_FORBID

    text: str | list[str] | None = None
    input_ids: list[TokenId] | list[list[TokenId]] | None = None
    sampling_params: NativeSamplingParams | list[NativeSamplingParams] | None = None
    rid: str | list[str] | None = None
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int = Field(-1, ge=-1, le=2**31 - 1)
    top_logprobs_num: int = Field(0, ge=0, le=20)
    return_text_in_logprobs: bool = False

    @model_validator(mode="after")
    def _one_prompt_kind(self) -> GenerateRequest:
        if (self.text is None) == (self.input_ids is None):
            raise ValueError("give exactly one of `text` or `input_ids`")
        return self


class AbortRequest(BaseModel):
    model_config = _STRICT_IGNORE
    rid: str


# OpenAI


class StreamOptions(BaseModel):
    model_config = _STRICT_IGNORE
    include_usage: bool = False


class _OpenAISampling(BaseModel):
    """Fields shared by completions and chat; the last group are vLLM/sglang extensions."""

    model_config = _STRICT_IGNORE

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

    def sampling_params(self, max_new_tokens: int, logprobs: bool, top_logprobs: int) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=max_new_tokens, temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k, min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty,
            seed=self.seed, stop=self.stop, stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos, logprobs=logprobs, top_logprobs=top_logprobs)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_OpenAISampling):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    max_tokens: int | None = Field(16, ge=0, le=2**31 - 1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None


class TextPart(BaseModel):
    model_config = _STRICT_IGNORE
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = _STRICT_IGNORE
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def as_template_dict(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": content or ""}


class ChatCompletionRequest(_OpenAISampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0, le=2**31 - 1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @property
    def max_new_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

