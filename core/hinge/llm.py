"""Offline Python API: ``LLM(...).generate(prompts, params)`` over one ``Engine``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hinge.config import DEFAULT_CACHE
from hinge.sampling_params import SamplingParams

if TYPE_CHECKING:
    from hinge.engine.engine import Engine
    from hinge.engine.request import RequestOutput

Prompt = str | Sequence[int]


class LLM:
    """An engine for offline use.

    ``engine_options`` are any other ``EngineConfig`` fields (``page_size``, ``kv_cache_bytes``,
    ``chunked_prefill_size``, ``max_running_requests``, ``max_model_len``, ``seed``, ...).
    Each result of ``generate`` is a ``RequestOutput``: ``text``, ``token_ids``,
    ``finish_reason``, ``logprobs``, ``top_logprobs``, ``prompt_logprobs``, ``cached_tokens``,
    ``spec_verify_ct``, ``spec_accepted_tokens``.
    """

    def __init__(self, model: str | None = None, device: str = "cpu", dtype: str = "auto",
                 attention: str = "torch", quantizer: str = "auto", speculator: str | None = None,
                 cache: str = DEFAULT_CACHE, deterministic: bool = False, *, progress: bool = False,
                 **engine_options: Any):
        from hinge.config import EngineConfig
        from hinge.engine.engine import Engine

        config = EngineConfig(
            model=None if model is None else str(model), device=device, dtype=dtype,
            attention=attention, quantizer=quantizer, speculator=speculator, cache=cache,
            deterministic=deterministic, **engine_options)
        self.engine: Engine | None = Engine(config, progress=progress)
        self._next_id = 0

    @property
    def tokenizer(self):
        return self._engine().tokenizer

    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("this LLM is closed; create a new LLM(...)")
        return self.engine

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """Run every prompt to completion; one result per prompt, in order.

        ``prompts``: a string, a list of token ids, or a list of either. ``params``: one
        ``SamplingParams`` for all prompts or one per prompt (None: defaults).
        """
        engine = self._engine()
        batch = _as_prompt_list(prompts)
        if params is None or isinstance(params, SamplingParams):
            params_list = [params or SamplingParams()] * len(batch)
        else:
            params_list = list(params)
            if len(params_list) != len(batch):
                raise ValueError(f"got {len(params_list)} SamplingParams for {len(batch)} prompts; "
                                 "pass one for all or one per prompt")
        ids = [engine.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in batch]
        return self._run(ids, params_list)

    def chat(self, messages: Sequence[dict] | Sequence[Sequence[dict]],
             params: SamplingParams | Sequence[SamplingParams] | None = None
             ) -> list[RequestOutput]:
        """Apply the tokenizer's chat template (generation prompt added) and generate.

        ``messages``: one conversation (a list of ``{"role", "content"}``) or a list of them.
        """
        engine = self._engine()
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        ids = [engine.tokenizer.apply_chat_template(list(c), add_generation_prompt=True)
               for c in convs]
        return self.generate(ids, params)

    def _run(self, ids: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        engine = self._engine()
        rids = []
        try:
            for prompt_ids, p in zip(ids, params, strict=True):
                rid = f"llm-{self._next_id}"
                self._next_id += 1
                rids.append(engine.add_request(prompt_ids, p, rid=rid))
            wanted = set(rids)  # NOTE: a step also reports requests aborted by an earlier call
            results: dict[str, RequestOutput] = {}
            while len(results) < len(rids):
                for out in engine.step():
                    if out.finished and out.rid in wanted:
                        results[out.rid] = out
        except BaseException:
            for rid in rids:
                engine.abort_request(rid)
            raise
        return [results[rid] for rid in rids]

    def flush_cache(self) -> bool:
        return self._engine().flush_cache()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    prompts = list(prompts)
    if prompts and all(isinstance(t, int) for t in prompts):
        return [prompts]
    if not prompts:
        raise ValueError("no prompts given")
    return prompts
