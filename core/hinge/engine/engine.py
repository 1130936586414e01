"""The engine loop: schedule, run, sample, stop, hand finished KV to the cache policy.

Start-up follows the plan (docs/internals.md): plugin manager -> resolved plan -> quantizer ->
model -> attention backend and cache policy -> KV pool sized from the memory budget.
"""

from __future__ import annotations

import itertools
import logging
import random
import uuid
from typing import TYPE_CHECKING, Any

import torch

from hinge.devices import to_device
from hinge.engine import gc_freeze
from hinge.engine.cache_stats import cache_context, checkpoint_slot_count, prefix_cache_stats
from hinge.engine.graphs import capture_graphs
from hinge.engine.kv_pool import KVPool, kv_budget_bytes
from hinge.engine.memory import profile_step_bytes
from hinge.engine.output import append_token, make_output
from hinge.engine.request import Request, RequestOutput
from hinge.engine.results import HostResults, LaunchedStep, PinnedRing
from hinge.engine.runner import ModelRunner
from hinge.engine.sampler import Sampler
from hinge.engine.scheduler import Scheduler
from hinge.engine.stats import EngineStats, server_info
from hinge.engine.validation import validate_request
from hinge.engine.warmup import enabled as warmup_enabled
from hinge.engine.warmup import run_warmup

if TYPE_CHECKING:
    from hinge.config import EngineConfig
    from hinge.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class Engine:
    """One model, its KV pool and the request loop; not thread safe (``AsyncEngine`` wraps it).

    ``add_request`` validates and queues, ``step`` runs one batch and returns a ``RequestOutput``
    for every request that produced a token or finished, ``abort_request`` finishes one now.
    """

    def __init__(self, config: EngineConfig, *, progress: bool = True):
        from hinge.engine.tokenizer import Tokenizer
        from hinge.logs import log_startup_banner
        from hinge.models import load_model
        from hinge.models.graph_votes import model_votes
        from hinge.plugins.manager import get_plugin_manager
        from hinge.plugins.plan import resolve_plan
        from hinge.threads import apply_cpu_threads

        config = config.resolved()
        if config.model is None:
            from hinge.builtin import default_model_path

            config = config.model_copy(update={"model": str(default_model_path())})
        self.config = config
        self.cpu_threads = apply_cpu_threads(config)  # torch intra-op threads (hinge.threads)
        if config.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' was asked for, but torch sees no CUDA device "
                             f"(torch {torch.__version__}); use device='cpu' or a CUDA build")
        # plan
        self.plugin_manager = get_plugin_manager(config.plugins)
        self.plan = resolve_plan(config, self.plugin_manager, model_votes=model_votes)
        # NOTE: the plan may choose the page size the attention backends share (an unset page_size)
        config = self.config = config.model_copy(update={
            "page_size": self.plan.config.page_size, "track_interval": self.plan.config.track_interval})
        if self.plan.speculator is not None:
            raise ValueError(
                f"speculator {config.speculator!r} was selected, but this engine does not run "
                "speculative decoding yet; leave speculator unset (None)")
        self.device = config.device
        self.dtype = config.torch_dtype()
        build = self.plan.build_context()
        # model
        free_before = torch.cuda.mem_get_info()[0] if self.device == "cuda" else None
        allocated_before = torch.cuda.memory_allocated() if self.device == "cuda" else 0
        quantizer = self.plan.build_quantizer(build)
        self.model = load_model(config.model, device=self.device, dtype=self.dtype,
                                quantizer=quantizer, deterministic=config.deterministic,
                                progress=progress, load_format=config.load_format)
        mcfg = self.model.config
        build = self.plan.build_context(mcfg)
        self.attn = self.plan.build_attention(build)  # prefill and mixed steps (every step, unsplit)
        #: decode and verify steps: ``attention_decode`` when the plan has one, else ``attn``
        self.attn_decode = self.plan.build_attention_decode(build) or self.attn
        self.tokenizer = Tokenizer.from_pretrained(config.model)
        self.vocab_size = mcfg.vocab_size
        self.max_model_len = config.max_model_len or mcfg.max_position_embeddings
        self.model.ensure_positions(self.max_model_len)  # once: no step grows a table
        self.eos_ids = frozenset(mcfg.eos_token_ids) | frozenset(self.tokenizer.eos_token_ids)
        # KV cache: sized after a profiling forward at the largest step (hinge.engine.memory)
        step_tokens = config.chunked_prefill_size if config.chunked_prefill_size > 0 else \
            min(self.max_model_len, 8192)
        activations = profile_step_bytes(
            self.model, self.attn, num_tokens=step_tokens, page_size=config.page_size,
            dtype=self.dtype, device=self.device,
            state_pool_factory=self._state_pool_factory(config),
            sampler_rows=config.max_running_requests + 1)
        if self.plan.graphs["prefill"].enabled:
            activations *= 2  # NOTE: the graph pool keeps the largest prefill step's activations
        budget = kv_budget_bytes(self.device, kv_cache_bytes=config.kv_cache_bytes,
                                 mem_fraction_static=config.mem_fraction_static,
                                 free_before_weights=free_before, activation_bytes=activations,
                                 weight_bytes=self._weight_bytes(allocated_before))
        self.states = self._create_state_pool(config, budget)
        if self.states is not None:
            budget -= self.states.nbytes
        self.kv = KVPool.create(self.model.attention_layers, budget_bytes=budget,
                                 page_size=config.page_size, dtype=self.dtype, device=self.device)
        # prefix cache: built after the pools it works over (hinge.contracts.CacheContext)
        self.cache = self.plan.build_cache(build)
        self.cache.attach(cache_context(config, self.kv, self.states))
        # loop parts
        self.scheduler = self.new_scheduler(self.cache)
        self.runner = ModelRunner(self.model, self.attn, self.kv, self.device, states=self.states,
                                  max_rows=config.max_running_requests + 1,
                                  max_pages=self.kv.pages_needed(self.max_model_len),
                                  attn_decode=self.attn_decode)
        self.sampler = Sampler(self.vocab_size, self.device, deterministic=config.deterministic,
                               max_rows=config.max_running_requests + 1, eos_ids=self.eos_ids)
        self._grammar_backend: Any = None  #: built when the first request with a grammar arrives
        # NOTE: start-up and steps run in inference mode: buffers a kernel library allocates there
        # (flashinfer's plan buffers) may only be updated in inference mode later
        with torch.inference_mode():
            # attention kernels compile (or load from their JIT cache) now, not on the first request
            for attn in {id(a): a for a in (self.attn, self.attn_decode)}.values():
                attn.warmup(self.model.attention_layers, self.kv)
            # CUDA graphs: the ladders of the phases the plan allows (hinge.engine.graphs)
            self.runner.graphs = capture_graphs(dict(self.plan.graphs), self.runner)
        #: overlap scheduling: collect step n's results after launching step n + 1 (CUDA)
        self.overlap = self.device == "cuda"
        self._inflight: LaunchedStep | None = None
        self._ring = PinnedRing(torch.device(self.device))
        self._seeds = random.Random(config.seed)
        self._arrivals = itertools.count()
        self._aborted: list[Request] = []
        self._stats: EngineStats
        #: checkpoints the receipts confirmed, by path (eager, graph) and phase (the request's:
        #: prefill or decode)
        self.checkpoint_writes: dict[str, dict[str, int]]
        self.reset_counters()
        if warmup_enabled(config):  # the first request compiles nothing (hinge.engine.warmup)
            run_warmup(self)
        #: the start-up heap out of the collector's passes (hinge.engine.gc_freeze), else None
        self.frozen = gc_freeze.freeze() if gc_freeze.enabled(config) else None
        log_startup_banner(self)  # model, plan, KV capacity, concurrency, threads (hinge.logs)

    def reset_counters(self) -> None:
        """Zero the engine's counters: stats, eager steps and graph replays, checkpoint writes
        (at start, and after the warm-up requests)."""
        self._stats = EngineStats(0, 0, self.config.page_size, 0, 0)
        self.checkpoint_writes = {}
        self.runner.eager_steps.clear()
        self.runner.num_forward_steps = 0
        if self.runner.graphs is not None:
            self.runner.graphs.replays = dict.fromkeys(self.runner.graphs.replays, 0)

    def _weight_bytes(self, allocated_before: int) -> int | None:
        """CUDA: what this process allocated since ``allocated_before`` (the weights, once the
        profiling forward freed its pools); None elsewhere."""
        if self.device != "cuda":
            return None
        return torch.cuda.memory_allocated() - allocated_before

    def new_scheduler(self, cache) -> Scheduler:
        """A scheduler over this engine's pools with ``cache`` as its prefix cache."""
        return Scheduler(self.kv, cache, max_running_requests=self.config.max_running_requests,
                         chunked_prefill_size=self.config.chunked_prefill_size, states=self.states)

    def _state_pool_factory(self, config: EngineConfig):
        """``make(num_slots) -> StatePool`` for hybrid models, None for dense ones."""
        layers = getattr(self.model, "recurrent_layers", None)
        if not layers:
            return None
        from hinge.engine.state_pool import StatePool

        return lambda num_slots: StatePool(layers, num_slots, conv_dtype=self.dtype,
                                           ssm_dtype=getattr(torch, config.state_dtype),
                                           device=self.device)

    def _create_state_pool(self, config: EngineConfig, budget: int):
        """Hybrid models: one recurrent-state slot per running request, taken from the KV budget."""
        layers = getattr(self.model, "recurrent_layers", None)
        if not layers:
            return None
        from hinge.engine.state_pool import StatePool

        ssm_dtype = getattr(torch, config.state_dtype)
        per_slot = StatePool.bytes_per_slot(layers, self.dtype, ssm_dtype)
        caps = self.plan.cache.spec.capabilities
        checkpoints = checkpoint_slot_count(
            config, per_slot, budget, recurrent_cache=caps.prefix_sharing and caps.recurrent_state)
        need = config.max_running_requests + 1 + checkpoints
        if need * per_slot >= budget:
            raise ValueError(
                f"the recurrent-state pool needs {need} slots ({checkpoints} of them checkpoint "
                f"slots) x {per_slot / 2**20:.2f} MiB = {need * per_slot / 2**20:.2f} MiB, not less "
                f"than the whole KV+state budget of {budget / 2**20:.2f} MiB; lower "
                "max_running_requests or raise kv_cache_bytes (CPU) / mem_fraction_static (CUDA), "
                "or lower checkpoint_slots")
        return StatePool.create(layers, max_requests=config.max_running_requests,
                                conv_dtype=self.dtype, ssm_dtype=ssm_dtype, device=self.device,
                                num_checkpoint_slots=checkpoints)

    # requests -------------------------------------------------------------------------------
    def add_request(self, prompt_ids: list[int], params: SamplingParams,
                    rid: str | None = None) -> str:
        rid = rid if rid is not None else uuid.uuid4().hex
        if self.scheduler.find(rid) is not None:
            raise ValueError(f"request id {rid!r} is already in use; pick another rid")
        validate_request(prompt_ids, params, vocab_size=self.vocab_size,
                         max_model_len=self.max_model_len, kv_tokens=self.kv.num_usable_tokens)
        req = Request(rid, prompt_ids, params, arrival=next(self._arrivals))
        if params.grammar is not None:
            backend = self.grammar_backend()
            req.grammar = backend.matcher(backend.compile(params.grammar))  # GrammarError: 400
        if not params.is_greedy:
            req.sample_seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        self.scheduler.add(req)
        return rid

    def grammar_backend(self) -> Any:
        """The structured-output backend (``hinge.grammar.GrammarBackend``), built on first use
        from the plugin registry (``grammar_backend`` config field, default ``xgrammar``)."""
        if self._grammar_backend is None:
            from dataclasses import replace

            name = getattr(self.config, "grammar_backend", "xgrammar")
            spec = self.plugin_manager.get_component("grammar", name).spec
            options = spec.validate_options(getattr(self.config, "grammar_backend_options", {}))
            build = replace(self.plan.build_context(self.model.config), tokenizer=self.tokenizer)
            self._grammar_backend = spec.build(options, build)
        return self._grammar_backend

    def abort_request(self, rid: str) -> bool:
        req = self.scheduler.find(rid)
        if req is None:
            return False
        self.scheduler.finish(req)
        req.finish_reason = "abort"
        self._aborted.append(req)
        self._stats.num_aborted += 1
        return True

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._aborted) or self._inflight is not None

    # one step -------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Schedule and launch the next batch, then finish the previous one on the host.

        With ``overlap`` the results of the step just launched are collected by the next call,
        so detokenization and stop checks of step n run while step n + 1 runs on the device.
        """
        with torch.inference_mode():
            return self._step()

    def _step(self) -> list[RequestOutput]:
        outputs = [make_output(r, [], True) for r in self._aborted]
        self._aborted = []
        if self._inflight is not None and any(r.grammar is not None for r in self.scheduler.running):
            # NOTE: a grammar mask needs the request's last token on the host: no overlap
            outputs += self._collect(self._inflight)
            self._inflight = None
        sched = self.scheduler.schedule()
        launched = self._launch(sched) if sched is not None else None
        previous, self._inflight = self._inflight, None
        if previous is not None:
            outputs += self._collect(previous)
        if launched is not None:
            if self.overlap:
                self._inflight = launched
            else:
                outputs += self._collect(launched)
        elif previous is None and self.scheduler.has_unfinished():
            raise RuntimeError(
                f"scheduler made no progress: {len(self.scheduler.running)} running, "
                f"{len(self.scheduler.waiting)} waiting, {self.kv.allocator.num_free} free "
                "KV pages (this is a bug)")
        return outputs

    def _launch(self, sched) -> LaunchedStep:
        """Run the model and the sampler on ``sched``; results stay on the device (no sync)."""
        logits = self.runner.forward(sched)
        self._stats.forward_steps += 1
        for req, n in zip(sched.reqs, sched.extend_lens, strict=True):
            req.num_computed += n
        prompt_lp = prompt_top = None
        if logits.prompt_logits is not None:
            lp = self.sampler.log_softmax(logits.prompt_logits)
            targets = [t for _, _, ts in logits.prompt_rows for t in ts]
            prompt_lp = lp.gather(1, to_device(targets, torch.int64, lp.device)[:, None])[:, 0]
            k = max(r.params.prompt_top_logprobs for r, _, _ in logits.prompt_rows)
            if k:  # NOTE: from the same tensor as prompt_lp: a greedy token's logprob equals the top
                prompt_top = lp.topk(k, dim=-1)
        live = [i for i, r in enumerate(logits.sample_reqs) if r.params.max_new_tokens > 0]
        reqs = [logits.sample_reqs[i] for i in live]
        sampled = None
        if reqs:
            rows = logits.sample_logits
            if len(live) < len(logits.sample_reqs):
                rows = rows.index_select(0, to_device(live, torch.int64, rows.device))
            args = self.sampler.prepare(reqs)
            sampled = self.sampler.sample(rows, args)
            self.runner.builder.last_tokens.index_copy_(0, args.rows, sampled.token_ids)
            for req in reqs:
                req.num_pending += 1
        return LaunchedStep(
            sched=sched,
            finish_now=[r for r in logits.sample_reqs if r.params.max_new_tokens == 0],
            sample_reqs=reqs,
            prompt_reqs=[(req, len(ts)) for req, _, ts in logits.prompt_rows],
            results=HostResults.send(sampled, prompt_lp, self._ring, prompt_top),
        )

    def _collect(self, step: LaunchedStep) -> list[RequestOutput]:
        """Host side of a launched step: logprobs, detokenization, stops, finished requests."""
        if step.sched.receipt is not None:  # first: a request finishing now inserts its checkpoints
            self._confirm_checkpoints(step.sched)
        tokens, logprobs, top, prompt_lp = ([], None, None, []) if step.results is None else \
            step.results.unpack()
        prompt_top = step.results.prompt_top() if step.results is not None else None
        at = 0
        for req, n in step.prompt_reqs:
            req.prompt_logprobs.extend(prompt_lp[at:at + n])
            if prompt_top is not None and req.params.prompt_top_logprobs:
                k = req.params.prompt_top_logprobs
                req.prompt_top_logprobs.extend(row[:k] for row in prompt_top[at:at + n])
            at += n
        outputs: list[RequestOutput] = []
        finished: list[Request] = []
        for req in step.finish_now:
            if not req.is_finished:
                req.finish_reason = "length"
                finished.append(req)
        for j, req in enumerate(step.sample_reqs):
            req.num_pending -= 1
            if req.is_finished:  # aborted, or stopped while this step ran: its token is dropped
                continue
            token = tokens[j]
            if logprobs is not None:
                req.logprobs.append(logprobs[j])
            if top is not None and req.params.top_logprobs:
                req.top_logprobs.append(top[j][:req.params.top_logprobs])
            append_token(req, token, self.tokenizer, self.eos_ids)
            self._stats.generation_tokens += 1
            if req.finish_reason is not None:
                finished.append(req)
            else:
                outputs.append(make_output(req, [token], False))
        for req in finished:
            self.scheduler.finish(req)
            self._stats.num_finished += 1
            self._stats.prompt_tokens += req.num_prompt
            self._stats.cached_tokens += req.cached_tokens
            new = req.output_ids[-1:] if req in step.sample_reqs and req.num_output else []
            outputs.append(make_output(req, new, True))
        return outputs

    def _confirm_checkpoints(self, sched) -> None:
        """The step's receipt: which checkpoint slots every recurrent layer wrote (counted by path
        and phase; only those can enter the prefix cache)."""
        confirmed = self.scheduler.confirm_checkpoints(sched, sched.receipt.written())
        by_phase = self.checkpoint_writes.setdefault(sched.path, {})
        for phase, n in confirmed.items():
            by_phase[phase] = by_phase.get(phase, 0) + n
        sched.receipt = None

    # control --------------------------------------------------------------------------------
    def flush_cache(self) -> bool:
        if self.scheduler.has_unfinished():
            return False
        freed = self.cache.flush()
        if freed:
            self.kv.allocator.free(freed)
        return True

    def stats(self) -> EngineStats:
        s = self._stats
        s.kv_pages_total = self.kv.allocator.num_usable
        # NOTE: pages only the prefix cache holds are evictable, i.e. available (as sglang and vLLM count)
        s.kv_pages_cached = self.cache.num_evictable_pages()
        s.kv_pages_used = self.kv.allocator.num_used - s.kv_pages_cached
        s.prefix_cache = prefix_cache_stats(self)
        s.num_running = len(self.scheduler.running)
        s.num_waiting = len(self.scheduler.waiting)
        s.num_retractions = self.scheduler.num_retractions
        s.eager_steps = dict(self.runner.eager_steps)
        s.graph_replays = {**s.graph_replays, **self.runner.graph_replays}
        return EngineStats(**{k: getattr(s, k) for k in s.__dataclass_fields__})

    def server_info(self) -> dict[str, Any]:
        return server_info(self)

    def close(self) -> None:
        if self.model is None:
            return
        for req in list(self.scheduler.running) + list(self.scheduler.waiting):
            self.abort_request(req.rid)
        self._aborted = []
        # drop every large tensor so a following engine on the same GPU gets the memory back
        self.model = self.runner = self.kv = self.states = self.attn = self.attn_decode = None
        self.scheduler.kv = self.scheduler.states = None
        if getattr(self, "frozen", None) is not None:  # (the closed engine's cycles collectable again)
            gc_freeze.thaw()
            self.frozen = None
        if self.device == "cuda":
            import gc

            gc.collect()
            torch.cuda.empty_cache()
