"""Tiny seeded hybrid checkpoints (transformers ``save_pretrained``, float32) and a step harness
that runs a hinge model on hand-built ``ForwardBatch``es over a real KV pool and state pool.

(A module of its own, not conftest.py: test files import it by a name no other test dir uses.)"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from hinge.batching import ForwardBatchBuilder, StepSeq
from hinge.builtin.no_quant import NoQuantizer
from hinge.builtin.torch_attention import TorchAttentionBackend
from hinge.engine.kv_pool import KVPool
from hinge.engine.state_pool import StatePool
from hinge.forward import ForwardContext
from hinge.layers.recurrent_kernels import TorchRecurrentKernels
from hinge.models.loader import load_model

VOCAB = 96


def tiny_hf_config(arch: str):
    import transformers as tf

    qwen_linear = dict(
        linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
        linear_num_key_heads=2, linear_num_value_heads=4,
    )
    common = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, eos_token_id=VOCAB - 1, bos_token_id=1, pad_token_id=0)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    layers = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    if arch in ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"):
        text = tf.Qwen3_5TextConfig(**common, **qwen_linear, intermediate_size=48, num_hidden_layers=4,
                                    head_dim=16, layer_types=layers, rope_parameters=rope)
        if arch == "Qwen3_5ForCausalLM":
            return text
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                      patch_size=4, temporal_patch_size=2, spatial_merge_size=2)
        return tf.Qwen3_5Config(text_config=text.to_dict(), vision_config=vision)
    if arch == "Qwen3NextForCausalLM":
        return tf.Qwen3NextConfig(**common, **qwen_linear, intermediate_size=48, num_hidden_layers=4,
                                  head_dim=16, layer_types=layers, rope_parameters=rope,
                                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                  shared_expert_intermediate_size=40, decoder_sparse_step=1,
                                  mlp_only_layers=[1], norm_topk_prob=True)
    if arch == "Lfm2ForCausalLM":
        return tf.Lfm2Config(**common, intermediate_size=64, num_hidden_layers=4, conv_L_cache=3,
                             layer_types=["conv", "full_attention", "conv", "conv"],
                             block_multiple_of=8, conv_bias=True, tie_word_embeddings=True,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    raise KeyError(arch)


def make_hybrid_checkpoint(root: Path, arch: str, seed: int = 0, **overrides) -> Path:
    """Save a seeded random model; every 1-D weight (norms, biases, A_log, dt_bias) is perturbed so
    an offset or a swapped vector cannot hide behind HF's constant initialisation."""
    import transformers as tf

    torch.manual_seed(seed)
    config = tiny_hf_config(arch)
    for key, value in overrides.items():  # text-model fields, e.g. linear_key_head_dim=32
        setattr(config.get_text_config(), key, value)
    model = getattr(tf, arch)(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
            elif "embed" in name or "lm_head" in name:
                p.normal_(0, 0.5)
    model.config.architectures = [arch]
    path = root / arch
    model.save_pretrained(path)
    return path


def hf_model(path: Path):
    import transformers as tf

    arch = tf.AutoConfig.from_pretrained(path).architectures[0]
    return getattr(tf, arch).from_pretrained(path, dtype=torch.float32).eval()


@dataclass
class ReqState:
    pages: list[int] = field(default_factory=list)
    slot: int = 0
    row: int = 0
    num_computed: int = 0


class StepHarness:
    """Runs ``model`` one step at a time for requests identified by name (pages and slots kept)."""

    def __init__(self, model, page_size: int = 4, num_pages: int = 256, max_requests: int = 8,
                 deterministic: bool = False):
        self.model = model
        dev = self.device = model.device
        layers = model.attention_layers
        itemsize = torch.empty((), dtype=model.dtype).element_size()
        per_page = sum(2 * a.num_kv_heads * a.head_dim * itemsize for a in layers) * page_size
        self.kv = KVPool.create(layers, budget_bytes=per_page * num_pages, page_size=page_size,
                                 dtype=model.dtype, device=dev)
        self.states = StatePool(model.recurrent_layers, max_requests + 1, conv_dtype=model.dtype,
                                device=dev)
        self.attn = TorchAttentionBackend(
            build=SimpleNamespace(page_size=page_size, deterministic=deterministic)
        )
        self.reqs: dict[str, ReqState] = {}
        self.builder = ForwardBatchBuilder(page_size=page_size, max_rows=max_requests + 1,
                                           max_pages=num_pages, device=dev)

    def step(self, chunks: list[tuple[str, list[int]]], *, all_logits: bool = False,
             track_states: bool = False, capture: tuple[int, ...] = ()):
        seqs = []
        for rid, tokens in chunks:
            req = self.reqs.get(rid)
            if req is None:
                req = self.reqs[rid] = ReqState(slot=self.states.allocate(), row=len(self.reqs) + 1)
            start, n = req.num_computed, len(tokens)
            need = self.kv.pages_needed(start + n) - len(req.pages)
            req.pages += self.kv.allocator.allocate(need)
            seqs.append(StepSeq(row=req.row, prefix_len=start, extend_len=n, pages=req.pages,
                                new_tokens=tokens, state_slot=req.slot,
                                logits_rows=range(n) if all_logits else (), sample=not all_logits))
        batch = self.builder.build(seqs, phase="mixed", track_states=track_states,
                                   capture_hidden_layers=capture)
        batch.attn_metadata = self.attn.prepare_metadata(batch)
        ctx = ForwardContext(batch=batch, attn=self.attn, kv=self.kv, states=self.states)
        with torch.inference_mode():
            out = self.model.forward(ctx)
        for rid, tokens in chunks:
            self.reqs[rid].num_computed += len(tokens)
        return out

    def greedy(self, rid: str, prompt: list[int], max_new: int, chunk: int | None = None) -> list[int]:
        chunk = chunk or len(prompt)
        for s in range(0, len(prompt), chunk):
            out = self.step([(rid, prompt[s : s + chunk])])
        tokens = [int(out.logits[-1].argmax())]
        while len(tokens) < max_new:
            tokens.append(int(self.step([(rid, tokens[-1:])]).logits[-1].argmax()))
        return tokens


def load_hinge(path: Path, device: str = "cpu", dtype: torch.dtype = torch.float32,
               deterministic: bool = False):
    quantizer = NoQuantizer(build=SimpleNamespace(deterministic=deterministic))
    return load_model(path, device=device, dtype=dtype, quantizer=quantizer,
                      deterministic=deterministic, progress=False)


class InterpretedInPool(TorchRecurrentKernels):
    """The torch reference kernels with CUDA's in-place decode paths taken from interpreted
    modules: ``rule`` (``decode_in_pool.py``) and/or ``conv`` (``conv_in_pool.py``); a path
    without its module keeps the gather. ``calls`` counts the in-place calls ("rule", "conv").
    ``deterministic``: the deterministic reference kernels, and the conv through
    ``conv_in_pool_exact`` (as deterministic CUDA runs it)."""

    def __init__(self, *, rule=None, conv=None, deterministic: bool = False) -> None:
        super().__init__(deterministic=deterministic)
        self.rule, self.conv = rule, conv
        self.calls: Counter = Counter()

    def decode_in_pool(self, *args):
        if self.rule is None:
            return None
        self.calls["rule"] += 1
        return self.rule.decode_in_pool(*args)

    def conv_in_pool(self, *args, **kwargs):
        if self.conv is None:
            return None
        self.calls["conv"] += 1
        run = self.conv.conv_in_pool_exact if self.deterministic else self.conv.conv_in_pool
        return run(*args, **kwargs)


@functools.cache
def interpreted_kernel(name: str):
    """``hinge/layers/recurrent_kernels/<name>.py`` loaded once as a private copy whose kernels run
    under Triton's interpreter (``hinge.testing.triton_interpreter``, which also keeps the modules
    the copy imports first, such as ``delta_rule_triton``, out of the regular imports; patch the
    interpreter in the test that calls them)."""
    import hinge
    from hinge.testing.triton_interpreter import load_interpreted

    path = Path(hinge.__file__).parent / "layers" / "recurrent_kernels" / f"{name}.py"
    return load_interpreted(path, f"_interpreted_{name}")
