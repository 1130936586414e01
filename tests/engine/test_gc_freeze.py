"""The start-up heap frozen out of the garbage collector's passes (``hinge.engine.gc_freeze``):
what the engine leaves behind at start-up is no longer walked by a full collection, what comes
after still is, and closing the engine gives its heap back to the collector."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from hinge.config import EngineConfig
from hinge.engine import gc_freeze
from hinge.engine.engine import Engine
from hinge.logs import banner_lines
from hinge.sampling_params import SamplingParams
from hinge.testing.checkpoints import make_tiny_checkpoint, write_byte_tokenizer
from hinge.testing.engine_runs import run_requests

PARAMS = [SamplingParams(max_new_tokens=5, temperature=0, ignore_eos=True, logprobs=True)]
PROMPTS = [[5, 9, 11, 40, 2, 7]]


class Cycle:
    """An object in a reference cycle: only a collection frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed():
    gc.unfreeze()  # (a test before may have left a frozen heap)
    yield
    gc.unfreeze()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = make_tiny_checkpoint("qwen3", tmp_path_factory.mktemp("gc-freeze"), seed=3)
    write_byte_tokenizer(path)
    return path


def thawed_count() -> int:
    """What the permanent generation holds in a process with nothing frozen, once a collection
    has run: CPython 3.12 keeps a few hundred of its own objects there (375 on 3.12.1, the GPU
    host's 3.12 alike; 3.11 and 3.13 none), which ``gc.unfreeze`` hands over until the next
    collection puts them back."""
    gc.unfreeze()
    gc.collect()
    return gc.get_freeze_count()


def _engine(path, mode: str) -> Engine:
    return Engine(EngineConfig(model=str(path), device="cpu", gc_freeze=mode, kv_cache_bytes=32 << 20),
                  progress=False)


def test_auto_freezes_on_cuda_only_and_on_and_off_mean_what_they_say():
    def cfg(device, mode):
        return EngineConfig(model="m", device=device, gc_freeze=mode)

    assert gc_freeze.enabled(cfg("cuda", "auto")) and not gc_freeze.enabled(cfg("cpu", "auto"))
    assert gc_freeze.enabled(cfg("cpu", "on")) and not gc_freeze.enabled(cfg("cuda", "off"))
    with pytest.raises(ValueError, match="gc_freeze"):
        cfg("cpu", "yes")


def test_the_start_up_heap_is_out_of_the_collectors_passes_until_the_engine_closes(checkpoint):
    cycle = weakref.ref(Cycle())  # (unreachable garbage: the start-up's own collection frees it)
    kept = Cycle()
    kept_ref = weakref.ref(kept)
    baseline = thawed_count()
    engine = _engine(checkpoint, "on")
    assert cycle() is None
    frozen = engine.frozen.objects
    assert frozen >= gc.get_freeze_count() > baseline + 1000  # (frozen objects freed since by reference counts leave it)
    assert engine.frozen.after_ms <= engine.frozen.full_pass_ms
    tracked = {id(o) for o in gc.get_objects()}
    assert id(engine.model) not in tracked and id(engine.scheduler) not in tracked and id(kept) not in tracked
    after = [engine]  # made after start-up: tracked as ever
    assert any(o is after for o in gc.get_objects())
    assert any(line.startswith(f"gc: {frozen} start-up objects frozen (a full collection ")
               for line in banner_lines(engine))
    got = [(o.token_ids, o.logprobs) for o in run_requests(engine, PROMPTS, PARAMS)]
    del kept  # a frozen cycle: no collection frees it while frozen
    gc.collect()
    assert kept_ref() is not None
    engine.close()
    assert gc.get_freeze_count() <= baseline  # given back ...
    gc.collect()
    assert kept_ref() is None and gc.get_freeze_count() <= baseline  # ... and collected as any other garbage
    plain = _engine(checkpoint, "off")
    try:
        assert plain.frozen is None and gc.get_freeze_count() <= baseline
        assert [(o.token_ids, o.logprobs) for o in run_requests(plain, PROMPTS, PARAMS)] == got
        assert "gc: start-up heap not frozen (gc_freeze off on cpu)" in banner_lines(plain)
    finally:
        plain.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_an_engine_freezes_by_default_and_generates_what_it_generates_unfrozen(checkpoint):
    """``auto`` on CUDA: frozen once started (graphs captured, warm-up run); the same tokens and
    logprobs as with ``off``, eager and graph steps alike; ``close()`` thaws."""
    got = {}
    baseline = thawed_count()
    for mode in ("auto", "off"):
        kept = Cycle()  # (made before the engine: frozen with its start-up heap in auto)
        engine = Engine(EngineConfig(model=str(checkpoint), device="cuda", dtype="bfloat16", gc_freeze=mode),
                        progress=False)
        try:
            assert (engine.frozen is not None) == (mode == "auto")
            assert (gc.get_freeze_count() > baseline + 1000) == (mode == "auto")
            assert any(o is kept for o in gc.get_objects()) == (mode == "off")
            got[mode] = [(o.token_ids, o.logprobs) for o in run_requests(engine, PROMPTS * 3, PARAMS * 3)]
        finally:
            engine.close()
        assert gc.get_freeze_count() <= baseline and any(o is kept for o in gc.get_objects())  # thawed
    assert got["auto"] == got["off"]
