"""hinge's eager decode step against a plain torch decode loop of the same model, in one run.

The model is the Qwen3-8B shape (36 layers, hidden 4096, 32/8 heads of 128, MLP 12288) with an
8192-token vocabulary (the embedded tokenizer's), bf16, random weights (``load_format=dummy``).
For each batch size: B requests of ``--prompt-len`` random tokens are prefilled, then
``--steps`` decode steps are timed (wall per ``Engine.step()``, synchronised at the end), and a
torch.profiler pass over a few steps splits each step into device busy time (kernel time) and
the rest (host work the device waited for). The plain loop is what a person writes by hand:
unfused RMSNorm, fused q|k|v and gate|up GEMMs, q/k-norm, rope, a scatter into a static KV
cache and SDPA with a mask, eager, the next token fed on the device.

    python tools/gpu/decode_step.py --batch 1 64 --json out.json

Prints one table; the ratio column is hinge's step time over the plain loop's (goal <= 1.3).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPE = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
             num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
             max_position_embeddings=40960, tie_word_embeddings=False)


def write_config(directory: Path, vocab: int, layers: int) -> Path:
    from transformers import Qwen3Config

    from hinge import default_model_path

    cfg = Qwen3Config(**{**SHAPE, "num_hidden_layers": layers}, vocab_size=vocab,
                      architectures=["Qwen3ForCausalLM"], eos_token_id=0, bos_token_id=None)
    cfg.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(default_model_path() / name, directory / name)
    return directory


# -- the plain loop ----------------------------------------------------------------------------


class PlainQwen3:
    """Random bf16 weights of the same shape and a static KV cache, one decode step per call."""

    def __init__(self, vocab: int, layers: int, batch: int, max_len: int, dev: str = "cuda") -> None:
        dt = torch.bfloat16
        h, hq, hk, d, m = (SHAPE["hidden_size"], SHAPE["num_attention_heads"],
                           SHAPE["num_key_value_heads"], SHAPE["head_dim"], SHAPE["intermediate_size"])
        self.hq, self.hk, self.d, self.eps = hq, hk, d, SHAPE["rms_norm_eps"]

        def w(*shape):
            return (torch.rand(*shape, device=dev, dtype=dt) - 0.5) * 0.04

        self.embed, self.lm_head, self.norm = w(vocab, h), w(vocab, h), torch.ones(h, device=dev, dtype=dt)
        self.layers = [dict(qkv=w((hq + 2 * hk) * d, h), o=w(h, hq * d), gu=w(2 * m, h), down=w(h, m),
                            n1=torch.ones(h, device=dev, dtype=dt), n2=torch.ones(h, device=dev, dtype=dt),
                            qn=torch.ones(d, device=dev, dtype=dt), kn=torch.ones(d, device=dev, dtype=dt))
                       for _ in range(layers)]
        self.k = [torch.zeros(batch, hk, max_len, d, device=dev, dtype=dt) for _ in range(layers)]
        self.v = [torch.zeros_like(t) for t in self.k]
        inv = 1.0 / (SHAPE["rope_theta"] ** (torch.arange(0, d, 2, device=dev).float() / d))
        freqs = torch.arange(max_len, device=dev).float()[:, None] * inv[None]
        emb = torch.cat([freqs, freqs], -1)
        self.cos, self.sin = emb.cos().to(dt), emb.sin().to(dt)
        self.keys = torch.arange(max_len, device=dev)

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    def rope(self, x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def step(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tokens (B,), pos (1,) device tensors -> next tokens (B,); no host sync."""
        b = tokens.shape[0]
        x = self.embed[tokens]
        cos, sin = self.cos[pos][:, None, None, :], self.sin[pos][:, None, None, :]
        mask = (self.keys <= pos)[None, None, None, :]
        hq, hk, d = self.hq, self.hk, self.d
        for i, lw in enumerate(self.layers):
            h = self.rms(x, lw["n1"])
            q, k, v = (h @ lw["qkv"].T).split([hq * d, hk * d, hk * d], -1)
            q = self.rope(self.rms(q.view(b, hq, 1, d), lw["qn"]), cos, sin)
            k = self.rope(self.rms(k.view(b, hk, 1, d), lw["kn"]), cos, sin)
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v.view(b, hk, 1, d))
            a = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=mask, enable_gqa=True)
            x = x + a.reshape(b, hq * d) @ lw["o"].T
            g, u = (self.rms(x, lw["n2"]) @ lw["gu"].T).chunk(2, -1)
            x = x + (F.silu(g) * u) @ lw["down"].T
        return (self.rms(x, self.norm) @ self.lm_head.T).float().argmax(-1)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_plain(vocab: int, layers: int, batch: int, prompt_len: int, steps: int, device: str) -> float:
    model = PlainQwen3(vocab, layers, batch, prompt_len + steps + 8, device)
    tokens = torch.randint(0, vocab, (batch,), device=device)
    pos = torch.tensor([prompt_len], device=device)
    with torch.inference_mode():
        for _ in range(3):
            tokens = model.step(tokens, pos)
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            tokens = model.step(tokens, pos)
            pos = pos + 1
        sync(device)
    ms = (time.perf_counter() - start) / steps * 1e3
    del model
    return ms


# -- hinge --------------------------------------------------------------------------------------


def device_busy_ms(fn, steps: int, device: str) -> float:
    """Kernel time per call of ``fn`` (torch.profiler, CUDA activity; 0 on cpu)."""
    from torch.profiler import ProfilerActivity, profile

    if device != "cuda":
        return 0.0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    return total_us / steps / 1e3


PROFILE_DIR: Path | None = None


def host_profile(fn, steps: int, stem: Path) -> None:
    """Where the host's time goes: cProfile (Python) and torch.profiler's CPU side (aten ops,
    CUDA runtime calls such as cudaEventSynchronize or cudaHostAlloc), top entries to files."""
    import cProfile
    import io
    import pstats

    from torch.profiler import ProfilerActivity, profile

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(40)
    stem.with_suffix(".cprofile.txt").write_text(out.getvalue())
    with profile(activities=[ProfilerActivity.CPU]) as tprof:
        for _ in range(steps):
            fn()
    stem.with_suffix(".torch.txt").write_text(
        tprof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


def time_hinge(model_dir: Path, batch: int, prompt_len: int, steps: int, overlap: bool,
               device: str) -> dict:
    from hinge.config import EngineConfig
    from hinge.engine.engine import Engine
    from hinge.sampling_params import SamplingParams

    config = EngineConfig(model=str(model_dir), device=device, dtype="bfloat16", load_format="dummy",
                          max_running_requests=max(batch, 1), mem_fraction_static=0.6,
                          max_model_len=prompt_len + 4 * steps + 64)
    engine = Engine(config, progress=False)
    engine.overlap = overlap
    params = SamplingParams(max_new_tokens=4 * steps + 32, temperature=0, ignore_eos=True)
    gen = torch.Generator().manual_seed(0)
    for _ in range(batch):
        engine.add_request(torch.randint(3, 8000, (prompt_len,), generator=gen).tolist(), params)
    while not all(r.num_generated > 0 for r in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()
    for _ in range(5):
        engine.step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    sync(device)
    wall = (time.perf_counter() - start) / steps * 1e3
    busy = device_busy_ms(engine.step, min(steps, 8), device)
    if PROFILE_DIR is not None:
        host_profile(engine.step, min(steps, 16), PROFILE_DIR / f"host_b{batch}_{'overlap' if overlap else 'sync'}")
    phases = dict(engine.runner.eager_steps)
    engine.close()
    return {"wall_ms": wall, "device_ms": busy, "host_gap_ms": max(wall - busy, 0.0), "eager_steps": phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"])
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run)")
    parser.add_argument("--profile", metavar="DIR", help="write host profiles of hinge's steps here")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain loop")
    args = parser.parse_args()
    global PROFILE_DIR
    PROFILE_DIR = Path(args.profile) if args.profile else None
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    with tempfile.TemporaryDirectory(prefix="hinge-8b-shape-") as tmp:
        model_dir = write_config(Path(tmp), args.vocab, args.layers)
        for b in args.batch:
            plain = float("nan") if args.no_plain else time_plain(
                args.vocab, args.layers, b, args.prompt_len, args.steps, args.device)
            row = {"batch": b, "plain_ms": plain}
            for overlap in (False, True):
                got = time_hinge(model_dir, b, args.prompt_len, args.steps, overlap, args.device)
                row["overlap" if overlap else "sync"] = got
            rows.append(row)
            print(json.dumps(row), flush=True)
    card = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"\n{card}, torch {torch.__version__}, Qwen3-8B shape "
          f"({args.layers} layers), vocab {args.vocab}, bf16, prompt {args.prompt_len}, {args.steps} steps")
    print(f"{'batch':>5} {'plain ms':>9} {'hinge ms':>9} {'device ms':>9} {'host gap':>9} "
          f"{'ratio':>6} {'overlap ms':>10} {'ratio':>6}")
    for r in rows:
        s, o = r["sync"], r["overlap"]
        print(f"{r['batch']:>5} {r['plain_ms']:>9.2f} {s['wall_ms']:>9.2f} {s['device_ms']:>9.2f} "
              f"{s['host_gap_ms']:>9.2f} {s['wall_ms'] / r['plain_ms']:>6.2f} {o['wall_ms']:>10.2f} "
              f"{o['wall_ms'] / r['plain_ms']:>6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
