"""Tool-call parsers: the model's tool-call text -> OpenAI ``tool_calls``.

- ``hermes`` (Qwen2.5, Qwen3): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
- ``qwen3_xml`` (Qwen3-Coder, Qwen3.5): ``<tool_call><function=NAME><parameter=P>v</parameter>
  </function></tool_call>``

The parser is chosen by ``--tool-call-parser`` or from the chat template (``parser_for_template``).
A block that does not parse stays in ``content`` (vLLM's rule: any error is plain text).
``StreamingToolCalls`` re-parses the whole text at each step, sends content up to the first tag
(holding back a suffix that could start one) and each call once it is complete.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_START = "<tool_call>"


@dataclass
class ToolCall:
    name: str
    arguments: str  #: JSON text, as OpenAI sends it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)


def _hermes_call(body: str) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return ToolCall(obj["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))


_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|\Z)", re.DOTALL)


def _xml_value(text: str) -> Any:
    value = text.strip("\n")
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _xml_call(body: str) -> ToolCall | None:
    match = _FUNCTION.search(body)
    if match is None:
        return None
    args = {m.group(1): _xml_value(m.group(2)) for m in _PARAM.finditer(match.group(2))}
    return ToolCall(match.group(1), json.dumps(args, ensure_ascii=False))


PARSERS = {"hermes": _hermes_call, "qwen3_xml": _xml_call}
ALIASES = {"qwen25": "hermes", "qwen3": "hermes", "qwen": "hermes", "qwen3_coder": "qwen3_xml",
           "qwen3_5": "qwen3_xml"}


def parser_name(name: str) -> str:
    """The canonical parser name, or ValueError listing the known ones."""
    canonical = ALIASES.get(name, name)
    if canonical not in PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}; known: "
                         f"{', '.join(sorted({*PARSERS, *ALIASES}))}")
    return canonical


def parser_for_template(template: Any) -> str | None:
    """The parser a chat template's tool-call format needs, or None when it renders no tools."""
    text = json.dumps(template) if not isinstance(template, str) else template
    if "tools" not in text:
        return None
    if "<function=" in text:
        return "qwen3_xml"
    if TOOL_CALL_START in text:
        return "hermes"
    return None


def parse_tool_calls(text: str, parser: str) -> tuple[str, list[ToolCall]]:
    """(content before the first tool call, the calls); unparsable text stays content."""
    one = PARSERS[parser]
    start = text.find(TOOL_CALL_START)
    if start < 0:
        return text, []
    calls = []
    for match in _BLOCK.finditer(text, start):
        call = one((match.group(1) if match.group(1) is not None else match.group(2)).strip())
        if call is None:
            return text, []
        calls.append(call)
    return text[:start].rstrip("\n") if calls else text, calls


def _held_back(text: str) -> int:
    """Length of the longest suffix of ``text`` that could start ``<tool_call>``."""
    for n in range(min(len(TOOL_CALL_START) - 1, len(text)), 0, -1):
        if TOOL_CALL_START.startswith(text[-n:]):
            return n
    return 0


class StreamingToolCalls:
    """Turns a growing text into content deltas and complete tool calls (one delta per call)."""

    def __init__(self, parser: str) -> None:
        self.parser = parser
        self.sent_content = 0
        self.calls: list[ToolCall] = []

    def feed(self, text: str, finished: bool) -> tuple[str, list[ToolCall]]:
        """(new content, newly complete calls) for the whole ``text`` so far."""
        start = text.find(TOOL_CALL_START)
        if start < 0:
            end = len(text) if finished else len(text) - _held_back(text)
            if not finished:  # newlines before a tag are not content: wait and see
                end = len(text[:end].rstrip("\n"))
            delta, self.sent_content = text[self.sent_content:end], max(self.sent_content, end)
            return delta, []
        content = text[self.sent_content:start].rstrip("\n") if start > self.sent_content else ""
        self.sent_content = max(self.sent_content, start)
        done = text if finished else text[:text.rfind("</tool_call>") + len("</tool_call>")] \
            if "</tool_call>" in text[start:] else text[:start]
        _, calls = parse_tool_calls(done, self.parser) if done[start:] else ("", [])
        if finished and not calls and done[start:]:
            # NOTE: the tool-call text did not parse: it is plain content after all
            return content + text[start:], []
        new = calls[len(self.calls):]
        for call in new:
            call.id = f"call_{uuid.uuid4().hex[:24]}"
        self.calls += new
        return content, new
