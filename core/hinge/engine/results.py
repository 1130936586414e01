"""One step's results on their way to the host: packed on the device, one copy, unpacked.

A launched step leaves on the device the sampled tokens, their logprobs, the top logprobs and
the prompt logprobs. They travel in one float64 tensor (token ids below 2**53 are exact)::

    [ tokens B | logprobs B? | top ids B*K | top logprobs B*K | prompt logprobs P
      | prompt top ids P*Kp | prompt top logprobs P*Kp ]

On CUDA the copy goes into a pinned buffer without blocking and an event marks when it lands, so
the host can prepare and launch the next step first (overlap); ``HostResults.wait`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from hinge.engine.request import Request, ScheduledBatch
    from hinge.engine.sampler import SampledTokens


@dataclass
class LaunchedStep:
    """What the engine remembers of a step between its launch and its results."""

    sched: ScheduledBatch
    finish_now: list[Request]  #: sampled nothing (max_new_tokens 0): finish with "length"
    sample_reqs: list[Request]  #: drew one token each, in row order of the packed results
    prompt_reqs: list[tuple[Request, int]]  #: (request, number of prompt logprobs), in order
    results: HostResults | None


class PinnedRing:
    """Two reusable host buffers (pinned on CUDA): a step's results are read before the buffer
    comes round again, since the engine collects step n before it launches step n + 2."""

    def __init__(self, device: torch.device) -> None:
        self.pinned = device.type == "cuda"
        self.buffers: list[torch.Tensor] = [torch.empty(0, dtype=torch.float64)] * 2
        self.turn = 0

    def take(self, n: int) -> torch.Tensor:
        self.turn ^= 1
        if self.buffers[self.turn].numel() < n:
            self.buffers[self.turn] = torch.empty(max(2 * n, 1024), dtype=torch.float64,
                                                  pin_memory=self.pinned)
        return self.buffers[self.turn][:n]


@dataclass
class HostResults:
    packed: torch.Tensor  #: host float64, possibly still being written (see ``event``)
    num_sampled: int
    has_logprobs: bool
    num_top: int
    num_prompt: int
    event: torch.cuda.Event | None = None
    num_prompt_top: int = 0  #: Kp: top logprobs per prompt position (0: none)
    _values: list[float] | None = field(default=None, repr=False)

    @classmethod
    def send(cls, sampled: SampledTokens | None, prompt_logprobs: torch.Tensor | None,
             ring: PinnedRing, prompt_top: tuple[torch.Tensor, torch.Tensor] | None = None
             ) -> HostResults | None:
        parts: list[torch.Tensor] = []
        b = k = 0
        has_lp = False
        if sampled is not None:
            b = sampled.token_ids.shape[0]
            parts.append(sampled.token_ids)
            if sampled.logprobs is not None:
                has_lp = True
                parts.append(sampled.logprobs)
            if sampled.top_ids is not None:
                k = sampled.top_ids.shape[1]
                parts += [sampled.top_ids.flatten(), sampled.top_logprobs.flatten()]
        p = 0
        if prompt_logprobs is not None:
            p = prompt_logprobs.shape[0]
            parts.append(prompt_logprobs)
        kp = 0
        if prompt_top is not None:  # (values, indices) of topk
            kp = prompt_top[0].shape[1]
            parts += [prompt_top[1].flatten(), prompt_top[0].flatten()]
        if not parts:
            return None
        packed = torch.cat([x.to(torch.float64) for x in parts])
        if packed.device.type == "cpu":
            return cls(packed, b, has_lp, k, p, num_prompt_top=kp)
        host = ring.take(packed.numel())
        host.copy_(packed, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return cls(host, b, has_lp, k, p, event, num_prompt_top=kp)

    def wait(self) -> list[float]:
        if self._values is None:
            if self.event is not None:
                self.event.synchronize()
            self._values = self.packed.tolist()
        return self._values

    def unpack(self):
        """(token ids, logprobs | None, top logprobs | None, prompt logprobs) as host lists."""
        v = self.wait()
        b, k = self.num_sampled, self.num_top
        tokens = [int(x) for x in v[:b]]
        at = b
        logprobs = None
        if self.has_logprobs:
            logprobs, at = v[at:at + b], at + b
        top = None
        if k:
            ids, vals = v[at:at + b * k], v[at + b * k:at + 2 * b * k]
            top = [[(int(ids[i * k + j]), vals[i * k + j]) for j in range(k)] for i in range(b)]
            at += 2 * b * k
        return tokens, logprobs, top, v[at:at + self.num_prompt]

    def prompt_top(self) -> list[list[tuple[int, float]]] | None:
        """Per prompt logprob position, its top (token id, logprob) pairs, or None."""
        kp, p = self.num_prompt_top, self.num_prompt
        if not kp:
            return None
        v = self.wait()
        at = len(v) - 2 * p * kp
        ids, vals = v[at:at + p * kp], v[at + p * kp:]
        return [[(int(ids[i * kp + j]), vals[i * kp + j]) for j in range(kp)] for i in range(p)]
