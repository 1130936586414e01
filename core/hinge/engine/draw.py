"""One draw per row from a batch of distributions, seeded per request, in a few batched ops.

``draw(probs, seeds, steps)`` returns ``argmax_v probs[r, v] / E[r, v]`` with ``E ~ Exp(1)``:
the exponential race, which picks token ``v`` with probability ``probs[r, v]`` (the minimum of
independent ``E_v / p_v`` is attained at ``v`` with probability ``p_v / sum p``). The noise is a
counter-based hash of (the request's seed, how many tokens it has drawn before, the token id):

- no generator state: the same request draws the same token at the same position whatever the
  batch around it, the step it lands in (overlap scheduling) or a retraction in between;
- one pass of elementwise integer ops over ``(B, V)`` instead of one ``torch.multinomial`` (and
  its kernels) per row, which cost ~7 ms per step at 64 sampled rows on an H200.

The hash is a 32-bit integer finaliser (xor-shift-multiply, three rounds) computed in int64 with
every product below 2**63, so CPU and CUDA give the same bits. 23 bits of each hash make the
uniform in (0, 1) (``k + 0.5`` is exact in float32); ``-log(u)`` is the exponential.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_MUL = 0x045D9F3B  # < 2**27: a product with a 32-bit value stays below 2**59
_GOLDEN = 0x9E3779B1


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit hash of int64 values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * _MUL) & _M32
    x = x ^ (x >> 16)
    x = (x * _MUL) & _M32
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """(B,) int64 keys in [0, 2**32) from 63-bit seeds and per-request draw counters."""
    seeds, steps = seeds.to(torch.int64), steps.to(torch.int64)
    key = _mix((seeds & _M32) ^ _mix((seeds >> 32) & _M32))
    return _mix(key ^ (steps & _M32))


def uniform_noise(keys: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, V) float32 uniforms in (0, 1) from (B,) row keys: one hash per (row, token id)."""
    ids = (torch.arange(vocab_size, device=keys.device, dtype=torch.int64) * _GOLDEN) & _M32
    h = _mix(keys[:, None] ^ ids[None, :])
    return ((h >> 9).to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def draw(probs: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """(B,) int64 tokens, row ``r`` drawn from ``probs[r]`` (rows sum to 1, zeros never drawn)
    with the noise of (``seeds[r]``, ``steps[r]``)."""
    exp = -torch.log(uniform_noise(row_keys(seeds, steps), probs.shape[1]))
    return (probs / exp).argmax(dim=-1)
