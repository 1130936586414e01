"""Per-token post-processing: append, detokenize incrementally, stop checks, RequestOutput.

Stop rules, checked in this order after each token:

- a stop token (``stop_token_ids``, or the model's eos unless ``ignore_eos``): the token stays in
  ``token_ids`` (it was generated and its KV is cached), its text is not added;
- a stop string in the text: the text is cut where the string starts (where it ends with
  ``no_stop_trim``); then a ``stop_regex`` match: the text is cut where the match starts;
- a grammar (structured output) that has accepted a complete value: finish reason ``stop``;
- ``max_new_tokens`` reached: finish reason ``length``.

Before ``min_new_tokens`` tokens no stop token can be drawn (the sampler masks them) and stop
strings and patterns are not checked. A request with a grammar advances its matcher with every
token it keeps (``GrammarMatcher.accept_token``), here on the host, before its next mask is made.

With ``detokenize=False`` no text is made (``text`` stays empty) and no stop string can be set
(``SamplingParams`` refuses them); the token rules are unchanged.

While a request runs, text that could be the start of a stop string is held back from
``new_text`` (the streaming delta), so a client never receives text that is later trimmed.
Outputs are deltas: ``new_token_ids``, ``new_text``, ``new_logprobs`` per step, the whole lists
only in the final output (``OutputAccumulator`` rebuilds them for streaming consumers).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from hinge.engine.request import RequestOutput

if TYPE_CHECKING:
    from hinge.engine.request import Request
    from hinge.engine.tokenizer import Tokenizer


def append_token(req: Request, token: int, tokenizer: Tokenizer | None,
                 eos_ids: frozenset[int]) -> None:
    """Add one sampled token to ``req`` and set ``finish_reason`` if it stops here."""
    params = req.params
    req.output_ids.append(token)
    grammar = getattr(req, "grammar", None)
    if grammar is not None and not grammar.is_terminated() and not grammar.accept_token(token):
        # NOTE: the sampler masked every token the grammar refuses; only a bug gets here
        req.text += req.detok.flush() if req.detok is not None else ""
        req.finish_reason, req.matched_stop = "abort", None
        return
    early = req.num_output < params.min_new_tokens
    if token in params.stop_token_ids or (not params.ignore_eos and token in eos_ids):
        _finish(req, "stop", token, tokenizer)
        return
    if tokenizer is not None and params.detokenize:
        if req.detok is None:
            req.detok = tokenizer.decode_stream(req.prompt_ids,
                                                skip_special_tokens=params.skip_special_tokens)
        delta = req.detok.step(token)
        if delta:
            req.text += delta
            if not early and params.stop and _trim_stop_string(req, len(delta)):
                return
            if not early and params.stop_regex and _trim_stop_regex(req):
                return
    if grammar is not None and grammar.is_terminated():
        _finish(req, "stop", token, tokenizer)
        return
    if req.num_output >= params.max_new_tokens:
        _finish(req, "length", None, tokenizer)


def _trim_stop_string(req: Request, delta_len: int) -> bool:
    longest = max(len(s) for s in req.params.stop)
    search_from = max(0, len(req.text) - delta_len - longest + 1)
    hits = [(idx, s) for s in req.params.stop if (idx := req.text.find(s, search_from)) >= 0]
    if not hits:
        return False
    idx, stop = min(hits)
    req.text = req.text[:idx + (len(stop) if req.params.no_stop_trim else 0)]
    req.finish_reason, req.matched_stop = "stop", stop
    return True


def _trim_stop_regex(req: Request) -> bool:
    """Cut the text where the earliest ``stop_regex`` match starts (whole text searched: a
    pattern may match across any number of tokens)."""
    hits = [(m.start(), m.end(), p) for p in req.params.stop_regex
            if (m := re.search(p, req.text)) is not None]
    if not hits:
        return False
    start, end, pattern = min(hits)
    req.text = req.text[:end if req.params.no_stop_trim else start]
    req.finish_reason, req.matched_stop = "stop", pattern
    return True


def _finish(req: Request, reason: str, matched: int | None, tokenizer: Tokenizer | None) -> None:
    req.finish_reason, req.matched_stop = reason, matched
    if req.detok is not None:  # held-back bytes of an incomplete character
        req.text += req.detok.flush()


def make_output(req: Request, new_token_ids: list[int], finished: bool) -> RequestOutput:
    """One step's output of ``req``: what is new (tokens, text, logprobs); the whole token and
    logprob lists only when it finishes, so a step costs O(new tokens), not O(tokens so far)."""
    params = req.params
    end = len(req.text)
    if not finished and params.stop:
        hold = max(len(s) for s in params.stop) - 1
        end = max(req.num_emitted_chars, end - hold)
    new_text = req.text[req.num_emitted_chars:end]
    req.num_emitted_chars = end
    n = len(new_token_ids)
    # the prompt's logprobs are whole once the first token is drawn: sent then and at the end
    prompt_done = finished or (n > 0 and req.num_output == n)
    new_lps = req.logprobs[len(req.logprobs) - n:] if params.logprobs and n else []
    new_tops = req.top_logprobs[len(req.top_logprobs) - n:] if params.top_logprobs and n else []
    return RequestOutput(
        rid=req.rid,
        prompt_token_ids=req.prompt_ids,
        token_ids=list(req.output_ids) if finished else None,
        new_token_ids=list(new_token_ids),
        text=req.text,
        finished=finished,
        finish_reason=req.finish_reason,
        matched_stop=req.matched_stop,
        logprobs=(list(req.logprobs) if params.logprobs else None) if finished else None,
        top_logprobs=(list(req.top_logprobs) if params.top_logprobs else None) if finished else None,
        prompt_logprobs=(list(req.prompt_logprobs) if params.prompt_logprobs_start is not None
                         and prompt_done else None),
        prompt_top_logprobs=(list(req.prompt_top_logprobs) if params.prompt_top_logprobs
                             and params.prompt_logprobs_start is not None and prompt_done
                             else None),
        cached_tokens=req.cached_tokens,
        spec_verify_ct=req.spec_verify_ct,
        spec_accepted_tokens=req.spec_accepted_tokens,
        new_text=new_text,
        new_logprobs=new_lps,
        new_top_logprobs=new_tops,
    )


class OutputAccumulator:
    """Turns one request's step outputs (deltas) back into whole ones, for consumers that read
    ``token_ids``/``logprobs`` on every step (the server's streams). The lists grow in place, so
    an output handed out earlier sees later tokens too; read it before taking the next one."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.top_logprobs: list[list[tuple[int, float]]] = []
        self.prompt_logprobs: list[float] | None = None  #: kept from the first output on
        self.prompt_top_logprobs: list[list[tuple[int, float]]] | None = None

    def add(self, out: RequestOutput) -> RequestOutput:
        if out.prompt_logprobs is not None:
            self.prompt_logprobs = out.prompt_logprobs
        if out.prompt_top_logprobs is not None:
            self.prompt_top_logprobs = out.prompt_top_logprobs
        if out.finished and out.token_ids is not None:
            return out  # the engine's final output is already whole
        self.token_ids += out.new_token_ids
        self.logprobs += out.new_logprobs
        self.top_logprobs += out.new_top_logprobs
        return replace(out, token_ids=self.token_ids,
                       logprobs=self.logprobs if out.new_logprobs or self.logprobs else None,
                       top_logprobs=self.top_logprobs if out.new_top_logprobs or self.top_logprobs
                       else None, prompt_logprobs=self.prompt_logprobs,
                       prompt_top_logprobs=self.prompt_top_logprobs)
