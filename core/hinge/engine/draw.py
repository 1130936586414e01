"""One draw per row from a batch of distributions, seeded per request, in a few batched ops.

``draw(weights, seeds, steps)`` returns ``argmax_v weights[r, v] / E[r, v]`` with ``E ~ Exp(1)``:
the exponential race, which picks token ``v`` with probability ``w_v / sum w`` (the minimum of
independent ``E_v / w_v`` is attained at ``v`` with that probability), so the weights need no
normalising. The noise is a counter-based hash of (the request's seed, how many tokens it has
drawn before, the token id), so a race over a subset of the vocabulary (``token_ids``: the
sampler's top-k candidates) gives each token the noise it has in the race over the whole
vocabulary, and both pick the same token when the other tokens weigh 0:

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

from hinge.layers import fast_triton

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


def _mix_int(x: int) -> int:
    x ^= x >> 16
    x = (x * _MUL) & _M32
    x ^= x >> 16
    x = (x * _MUL) & _M32
    return x ^ (x >> 16)


def row_keys_host(seeds: list[int], steps: list[int]) -> list[int]:
    """``row_keys`` in Python integers (the same values): the sampler computes a step's keys on
    the host and uploads them, instead of uploading seeds and steps and hashing them in ~36
    device kernels."""
    return [_mix_int(_mix_int((s & _M32) ^ _mix_int((s >> 32) & _M32)) ^ (n & _M32))
            for s, n in zip(seeds, steps, strict=True)]


def uniform_noise(keys: torch.Tensor, token_ids: int | torch.Tensor) -> torch.Tensor:
    """(B, N) float32 uniforms in (0, 1) from (B,) row keys: one hash per (row, token id).

    ``token_ids`` is an (N,) or (B, N) integer tensor of ids below 2**32, or an int V meaning
    ``arange(V)``; the uniform of (row, id) is the same whichever ids come with it. On CUDA one
    Triton kernel (``draw_kernel``: the same integer ops, so the same bits) instead of ~17."""
    if keys.shape[0] and fast_triton.enabled(keys, invariant=True):  # integer ops: any mode
        from hinge.engine.draw_kernel import hash_uniform

        return hash_uniform(keys, token_ids)
    if isinstance(token_ids, int):
        token_ids = torch.arange(token_ids, device=keys.device)
    ids = (token_ids.to(torch.int64) * _GOLDEN) & _M32
    h = _mix(keys[:, None] ^ (ids if ids.dim() == 2 else ids[None, :]))
    return ((h >> 9).to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def draw(weights: torch.Tensor, seeds: torch.Tensor | None, steps: torch.Tensor | None,
         token_ids: torch.Tensor | None = None, *, keys: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) int64 tokens, row ``r`` drawn from ``weights[r]`` (non-negative, not all 0; zeros
    are never drawn) with the noise of (``seeds[r]``, ``steps[r]``), or of ``keys[r]`` (their
    ``row_keys``, computed already) when given.

    ``weights`` is (B, V) in token-id order, or (B, N) with ``token_ids`` (B, N) naming each
    column's token (any order, each id at most once per row); a tie of the race goes to the
    smallest token id either way, so the columns' order never changes the token."""
    keys = row_keys(seeds, steps) if keys is None else keys
    ids = weights.shape[1] if token_ids is None else token_ids
    score = weights / -torch.log(uniform_noise(keys, ids))
    if token_ids is None:
        return score.argmax(dim=-1)  # NOTE: the first maximum is the smallest id
    best = score.amax(dim=-1, keepdim=True)
    none = torch.iinfo(torch.int64).max
    return torch.where(score == best, token_ids.to(torch.int64), none).amin(dim=-1)
