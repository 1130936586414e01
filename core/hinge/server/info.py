"""Model and tokenizer routes: sglang's ``/model_info`` (alias ``/get_model_info``) and vLLM's
``/tokenize``, ``/detokenize`` and ``/tokenizer_info`` (lm-eval probes the last two to tokenize
on the server)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from hinge.server.chat import message_dict
from hinge.server.context import APIError
from hinge.server.native import ctx_of
from hinge.server.protocol import ChatMessage, TokenId

router = APIRouter()
_IGNORE = ConfigDict(strict=True, extra="ignore")


@router.get("/model_info")
@router.get("/get_model_info")
async def model_info(request: Request) -> JSONResponse:
    """sglang's model info (``RuntimeEndpoint`` reads ``model_path`` at start)."""
    ctx = ctx_of(request)
    model = getattr(ctx.engine.engine, "model", None)
    config = getattr(model, "config", None)
    hf = getattr(config, "hf_config", None)
    path = ctx.model_root or ctx.model_name
    return JSONResponse({
        "model_path": path, "tokenizer_path": path, "is_generation": True,
        "preferred_sampling_params": None, "weight_version": "default",
        "model_type": getattr(hf, "model_type", None),
        "architectures": list(getattr(config, "architectures", None) or []) or None,
        "has_image_understanding": False, "has_audio_understanding": False,
        "served_model_names": ctx.model_names, "max_model_len": ctx.max_model_len})


class TokenizeRequest(BaseModel):
    """vLLM's ``/tokenize``: a ``prompt`` or chat ``messages``."""

    model_config = _IGNORE
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = _IGNORE
    model: str | None = None
    tokens: list[TokenId] = Field(max_length=1_000_000)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    ctx.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "send exactly one of `prompt` (text) or `messages` (a chat)")
    tok = ctx.tokenizer
    if body.messages is not None:
        if not body.messages:
            raise APIError(400, "messages is empty; send at least one message")
        messages = [message_dict(i, m) for i, m in enumerate(body.messages)]
        try:
            text = tok.apply_chat_template(messages, add_generation_prompt=body.add_generation_prompt,
                                           tokenize=False)
        except ValueError as exc:
            raise APIError(400, f"the chat template rejected the messages: {exc}") from exc
        ids = tok.encode(text, add_special_tokens=False)
    else:
        ids = tok.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    out: dict[str, Any] = {"count": len(ids), "max_model_len": ctx.max_model_len,
                           "tokens": list(ids), "token_strs": None}
    if body.return_token_strs:
        out["token_strs"] = [ctx.token_text(t) for t in ids]
    return JSONResponse(out)


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    ctx.check_model(body.model)
    vocab = ctx.vocab_size
    bad = [t for t in body.tokens if vocab is not None and t >= vocab]
    if bad:
        raise APIError(400, f"tokens outside the vocabulary [0, {vocab}): {bad[:5]}")
    return JSONResponse({"prompt": ctx.tokenizer.decode(body.tokens)})


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request) -> JSONResponse:
    """vLLM's tokenizer info: the special tokens, chat template and limits."""
    ctx = ctx_of(request)
    tok = ctx.tokenizer
    special = dict(getattr(tok, "special_tokens", {}) or {})
    eos_ids = list(getattr(tok, "eos_token_ids", []) or [])
    eos = special.get("eos_token")
    if eos is None and eos_ids:
        eos = ctx.token_text(eos_ids[0])
    return JSONResponse({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos,
        "bos_token": special.get("bos_token"), "pad_token": special.get("pad_token"),
        "unk_token": special.get("unk_token"), "eos_token_ids": eos_ids,
        "chat_template": getattr(tok, "chat_template", None),
        "model_max_length": ctx.max_model_len, "vocab_size": ctx.vocab_size,
        "add_bos_token": bool(getattr(tok, "add_bos_token", False)),
        "add_eos_token": bool(getattr(tok, "add_eos_token", False))})
