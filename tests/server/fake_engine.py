"""A small stand-in with the Engine interface (docs/internals.md) for the server's unit tests.

Tokens are characters: ``encode`` maps each character to ``ord(c) % 256``; the model emits
``(last + 1) % 256`` each step, one token per running request, so outputs are predictable.
With ``max_running``, at most that many requests run (in arrival order) and the rest wait, listed
in ``scheduler.waiting`` as the real engine's scheduler lists them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hinge.engine.request import RequestOutput

VOCAB = 256
EOS = 0


class CharTokenizer:
    eos_token_ids = [EOS]
    vocab_size = VOCAB

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % VOCAB for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tokenize: bool = True, tools: Any = None, **kwargs: Any):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        text += "<assistant>" if add_generation_prompt else ""
        return self.encode(text) if tokenize else text


@dataclass
class _Req:
    rid: str
    prompt: list[int]
    params: Any
    out: list[int] = field(default_factory=list)
    started: bool = False
    cached_tokens: int = 0


class FakeEngine:
    def __init__(self, max_model_len: int = 128, page_size: int = 4, fail_steps: int = 0,
                 step_delay: float = 0.0, max_running: int | None = None) -> None:
        self.max_running = max_running  #: requests beyond this wait (None: all run)
        self.step_delay = step_delay  #: seconds each step sleeps (a model that takes time)
        self.tokenizer = CharTokenizer()
        self.max_model_len = max_model_len
        self.page_size = page_size
        self.fail_steps = fail_steps  #: the next N steps raise
        self.hang = None  #: a threading.Event the next step waits on
        self.reqs: dict[str, _Req] = {}
        self.steps = 0

    def add_request(self, prompt_ids, params, rid=None) -> str:
        if len(prompt_ids) + params.max_new_tokens > self.max_model_len:
            raise ValueError(f"prompt + max_new_tokens exceed max_model_len {self.max_model_len}")
        if rid in self.reqs:
            raise ValueError(f"duplicate rid {rid}")
        self.reqs[rid] = _Req(rid, list(prompt_ids), params)
        return rid

    def abort_request(self, rid: str) -> bool:
        return self.reqs.pop(rid, None) is not None

    def has_unfinished(self) -> bool:
        return bool(self.reqs)

    def step(self) -> list[RequestOutput]:
        if self.hang is not None:
            self.hang.wait()
            self.hang = None
        if self.fail_steps:
            self.fail_steps -= 1
            raise RuntimeError("fake step failure")
        self.steps += 1
        time.sleep(self.step_delay)
        outputs = []
        for req in self._batch():
            req.started = True
            p = req.params
            last = (req.out or req.prompt)[-1]
            tok = (last + 1) % VOCAB
            req.out.append(tok)
            reason, matched = None, None
            if tok in p.stop_token_ids or (tok == EOS and not p.ignore_eos):
                reason, matched = "stop", tok
            elif len(req.out) >= p.max_new_tokens:
                reason = "length"
            text = self.tokenizer.decode(req.out)
            for s in p.stop:
                if s in text:
                    text, reason, matched = text[: text.index(s)], "stop", s
            lps = [-math.log(2.0)] * len(req.out) if p.logprobs else None
            tops = ([[(t, -math.log(2.0)), ((t + 1) % VOCAB, -math.log(4.0))][: p.top_logprobs]
                     for t in req.out] if p.top_logprobs else None)
            plps = None
            if p.prompt_logprobs_start is not None:
                plps = [-1.0] * (len(req.prompt) - max(p.prompt_logprobs_start, 1))
            done = reason is not None
            outputs.append(RequestOutput(  # the engine's contract: deltas, whole lists when done
                req.rid, req.prompt, list(req.out) if done else None, [tok], text, done, reason,
                matched, lps if done else None, tops if done else None, plps if done else None,
                new_logprobs=lps[-1:] if lps else [], new_top_logprobs=tops[-1:] if tops else []))
            if reason is not None:
                del self.reqs[req.rid]
        return outputs

    def _batch(self) -> list[_Req]:
        batch = [r for r in self.reqs.values() if r.started]
        for req in self.reqs.values():
            if not req.started and (self.max_running is None or len(batch) < self.max_running):
                batch.append(req)
        return batch

    @property
    def scheduler(self) -> SimpleNamespace:
        """The queues as ``Engine.scheduler`` holds them: requests with ``rid``."""
        return SimpleNamespace(waiting=[r for r in self.reqs.values() if not r.started],
                               running=[r for r in self.reqs.values() if r.started])

    def flush_cache(self) -> bool:
        return not self.reqs

    def stats(self) -> dict[str, Any]:
        used = sum(math.ceil((len(r.prompt) + len(r.out)) / self.page_size) for r in self.reqs.values())
        running = sum(r.started for r in self.reqs.values())
        return {"num_running": running, "num_waiting": len(self.reqs) - running,
                "kv_pages_used": used,
                "kv_pages_total": 1000, "page_size": self.page_size,
                "kv_tokens_total": 1000 * self.page_size, "kv_tokens_used": used * self.page_size,
                "num_steps": self.steps, "graph_replays": {"decode": 0, "prefill": 0}}

    def server_info(self) -> dict[str, Any]:
        return {"config": {"model": "fake"}, "plan": {"graphs": {}}, "kv_tokens": 4000}

    def close(self) -> None:
        self.reqs.clear()
