"""Chat requests -> the prompt: messages checked with readable errors, tools and
``chat_template_kwargs`` rendered through the model's chat template, and the constraint that
``tool_choice`` ``required`` or a named function puts on the reply (``hinge.grammar``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hinge.sampling_params import Grammar
from hinge.server.context import APIError, ServerContext
from hinge.server.protocol import ChatCompletionRequest, ChatMessage
from hinge.server.tool_parsers import parser_for_template


@dataclass
class ChatPrompt:
    ids: list[int]
    text: str  #: the rendered prompt (reasoning parsers read how it ends)
    tool_parser: str | None  #: parse the reply for tool calls with this parser (auto)
    forced: str | None  #: "required" or the function name a grammar forces the reply into
    grammar: Grammar | None


def message_dict(index: int, message: ChatMessage) -> dict[str, Any]:
    """A message as the template reads it; 400 naming the message for a missing content or an
    unsupported content part."""
    role = "system" if message.role == "developer" else message.role
    content = message.content
    where = f"messages[{index}] ({message.role})"
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type")
            if kind != "text" or not isinstance(part.get("text"), str):
                raise APIError(400, f"{where}: content part {j} has type {kind!r}; hinge serves "
                                    "text models: send text parts ({\"type\": \"text\", "
                                    "\"text\": ...}) or a string")
            texts.append(part["text"])
        content = "".join(texts)
    if content is None and not (message.role == "assistant" and message.tool_calls):
        raise APIError(400, f"{where} has no content; every message needs `content` (an "
                            "assistant message may have tool_calls instead)")
    out: dict[str, Any] = {"role": role, "content": content or ""}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning_content is not None:
        out["reasoning_content"] = message.reasoning_content
    if message.tool_calls:
        out["tool_calls"] = [_template_tool_call(call) for call in message.tool_calls]
    return out


def _template_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """Arguments as an object (templates write them with ``tojson``), as vLLM passes them."""
    call = json.loads(json.dumps(call))
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except json.JSONDecodeError:
            pass
    return call


def required_schema(tools: list[Any], parallel: bool = True) -> dict[str, Any]:
    """``tool_choice: required``: a non-empty list of calls to the given tools (vLLM's form);
    one call only when ``parallel_tool_calls`` is false."""
    bound = {} if parallel else {"maxItems": 1}
    return {"type": "array", "minItems": 1, **bound, "items": {"anyOf": [
        {"type": "object", "properties": {
            "name": {"type": "string", "enum": [t.function.name]},
            "parameters": t.function.parameters or {"type": "object"}},
         "required": ["name", "parameters"], "additionalProperties": False}
        for t in tools]}}


def build_chat_prompt(ctx: ServerContext, body: ChatCompletionRequest) -> ChatPrompt:
    messages = [message_dict(i, m) for i, m in enumerate(body.messages)]
    tools = body.tools or None
    choice = body.tool_choice
    if choice is not None and choice != "none" and not tools:
        raise APIError(400, "tool_choice needs tools; send the tools the model may call")
    tool_dicts = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    template = getattr(ctx.tokenizer, "chat_template", None)
    parser = ctx.tool_call_parser or (parser_for_template(template) if template else None)
    if tools and parser is None:
        raise APIError(400, "the chat template of this model does not support tools (it "
                            "renders no `tools`); send messages without tools, or start the "
                            "server with --tool-call-parser for a template that does")
    kwargs = dict(body.chat_template_kwargs or {})
    try:
        text = ctx.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=False, tools=tool_dicts, **kwargs)
    except APIError:
        raise
    except Exception as exc:  # noqa: BLE001 - a template that rejects the messages is a 400
        raise APIError(400, f"the chat template rejected the messages: {exc}") from exc
    ids = ctx.tokenizer.encode(text, add_special_tokens=False) if isinstance(text, str) \
        else list(text)
    forced, grammar = None, None
    if tools and choice == "required":
        schema = required_schema(tools, parallel=body.parallel_tool_calls is not False)
        forced, grammar = "required", Grammar("json_schema", json.dumps(schema))
    elif tools and choice is not None and not isinstance(choice, str):
        name = choice.function.name
        match = [t for t in tools if t.function.name == name]
        if not match:
            raise APIError(400, f"tool_choice names {name!r}, which is not among the tools "
                                f"({', '.join(t.function.name for t in tools)})")
        forced = name
        grammar = Grammar("json_schema", json.dumps(match[0].function.parameters
                                                    or {"type": "object"}))
    auto = tools is not None and (choice is None or choice == "auto")
    return ChatPrompt(ids, text if isinstance(text, str) else "", parser if auto else None,
                      forced, grammar)
