"""Reasoning parsers (``--reasoning-parser``): ``<think>...</think>`` -> ``reasoning_content``.

``qwen3`` (and ``deepseek_r1``): the text up to ``</think>`` is reasoning (a leading ``<think>``
dropped), the rest is content. Whether the reply starts inside the reasoning comes from the
rendered prompt: a template that opens ``<think>`` in the generation prompt (Qwen3.5, Qwen3
thinking) starts there; one that closed it (``enable_thinking: false``) starts in content. A
reply that started in content and never opens ``<think>`` is all content.
"""

from __future__ import annotations

START, END = "<think>", "</think>"
PARSERS = ("qwen3", "deepseek_r1")


def check_parser(name: str) -> str:
    if name not in PARSERS:
        raise ValueError(f"unknown reasoning parser {name!r}; known: {', '.join(PARSERS)}")
    return name


def starts_in_reasoning(prompt_text: str) -> bool:
    """Whether the generation prompt left a ``<think>`` open."""
    tail = prompt_text.rstrip()
    return tail.endswith(START) or (tail.rfind(START) > tail.rfind(END))


def split_reasoning(text: str, in_reasoning: bool) -> tuple[str | None, str]:
    """(reasoning or None, content) of a whole reply."""
    stripped = text.lstrip()
    if stripped.startswith(START):
        text, in_reasoning = stripped[len(START):], True
    if not in_reasoning:
        return None, text
    if END not in text:
        return text, ""
    reasoning, _, content = text.partition(END)
    return reasoning, content.lstrip("\n")


class StreamingReasoning:
    """Splits a growing reply into reasoning and content deltas (``</think>`` held back while
    the text could still be the start of it)."""

    def __init__(self, in_reasoning: bool) -> None:
        self.in_reasoning = in_reasoning
        self.sent_reasoning = 0
        self.sent_content = 0

    def feed(self, text: str, finished: bool) -> tuple[str, str]:
        """(new reasoning, new content) for the whole ``text`` so far."""
        reasoning, content = split_reasoning(text, self.in_reasoning)
        if reasoning is not None and END not in text and not finished:
            hold = next((n for n in range(len(END) - 1, 0, -1) if reasoning.endswith(END[:n])), 0)
            reasoning = reasoning[:len(reasoning) - hold]
        if reasoning is None and not finished and START.startswith(text.lstrip()):
            content = ""  # could still become "<think>"
        r_delta = (reasoning or "")[self.sent_reasoning:]
        c_delta = content[self.sent_content:]
        self.sent_reasoning += len(r_delta)
        self.sent_content += len(c_delta)
        return r_delta, c_delta
