"""The one interface recurrent layers call: gated delta rule and causal conv1d over a flat batch.

Every kernel works on all requests of a step at once. Tokens are concatenated (``T`` rows);
``cu_seqlens`` (host ints, ``B + 1`` entries) marks where request ``i`` starts and ends::

    rows        [ r0: cu[1]-cu[0] | r1: cu[2]-cu[1] | ... ]     T rows
    states      initial[i] -> (tokens of r_i) -> final[i]      one per request

Each call starts from the given initial state of every request and returns the final state; with
``track_states`` it also returns the state after every row (the shape a k+1-token verify needs:
the state after any prefix of the step can then be kept). States are float32 on return; the
caller casts them into the pool's dtype.

Conv windows use the engine convention: the last ``K - 1`` inputs, oldest first, shape
``(C, K - 1)`` (Hugging Face keeps ``K`` columns, the first unused).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


@dataclass
class ConvResult:
    out: torch.Tensor  #: (T, C) in the input dtype
    final_window: torch.Tensor  #: (B, C, K-1) in the input dtype
    position_windows: torch.Tensor | None = None  #: (T, C, K-1): window after each row


@dataclass
class DeltaRuleResult:
    out: torch.Tensor  #: (T, Hv, Dv) in the query dtype
    final_state: torch.Tensor  #: (B, Hv, Dk, Dv) float32
    position_states: torch.Tensor | None = None  #: (T, Hv, Dk, Dv) float32: state after each row


class RecurrentKernels(ABC):
    """Two implementations: ``torch`` (reference, any device) and ``fla`` (CUDA, fla-core Triton)."""

    name: str

    @abstractmethod
    def causal_conv1d(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        initial_window: torch.Tensor,
        cu_seqlens: list[int],
        *,
        activation: str | None = None,
        track_states: bool = False,
    ) -> ConvResult:
        """Depthwise causal convolution continuing from each request's window.

        :param x: (T, C) inputs.
        :param weight: (C, K) depthwise taps; ``out[t] = sum_j weight[:, j] * xs[t + j]`` over the
            window followed by the new inputs ``xs``.
        :param bias: (C,) or None.
        :param initial_window: (B, C, K-1), the last K-1 inputs before this step.
        :param activation: None or ``"silu"``.
        """

    @abstractmethod
    def gated_delta_rule(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        initial_state: torch.Tensor,
        cu_seqlens: list[int],
        *,
        track_states: bool = False,
    ) -> DeltaRuleResult:
        """Gated delta rule with q/k L2-normalised inside and queries scaled by ``Dk ** -0.5``.

        Per token: ``S = exp(g) * S``; ``S += k (beta * (v - k^T S))^T``; ``o = q^T S``.

        :param q: (T, Hk, Dk). :param k: (T, Hk, Dk). :param v: (T, Hv, Dv); ``Hv`` is a multiple
            of ``Hk`` and each q/k head serves ``Hv // Hk`` consecutive value heads.
        :param g: (T, Hv) log decay (<= 0), float32. :param beta: (T, Hv) in (0, 1).
        :param initial_state: (B, Hv, Dk, Dv), any float dtype (computed in float32).
        """

    def warmup_prompt_lengths(self) -> tuple[int, ...]:
        """Prompt lengths the engine's start-up warm-up must also run so that every path these
        kernels take is compiled before the first request (``hinge.engine.warmup``): none where
        one path serves every length."""
        return ()

    def decode_in_pool(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        pool: torch.Tensor,
        read_slots: torch.Tensor,
        write_slots: torch.Tensor,
        prefix_lens: torch.Tensor,
    ) -> torch.Tensor | None:
        """The gated delta rule of a decode step (one token per request: ``q`` (B, Hk, Dk), ...)
        that reads and writes the state pool in place, or None where these kernels have no such
        path (the caller then gathers the states, runs ``gated_delta_rule`` and writes the final
        states back).

        Request ``i`` starts from ``pool[read_slots[i]]`` (zeros where ``prefix_lens[i] == 0``);
        its state after the token is written to ``pool[write_slots[i]]`` in the pool's dtype.
        Device work only (no host read of the slots): it runs inside a captured CUDA graph.

        :param pool: (slots, Hv, Dk, Dv), the layer's matrix states (``StatePool.ssm[state_id]``).
        :returns: out (B, Hv, Dv) in the query dtype, or None.
        """
        return None

    def conv_in_pool(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        pool: torch.Tensor,
        read_slots: torch.Tensor,
        write_slots: torch.Tensor,
        prefix_lens: torch.Tensor,
        *,
        activation: str | None = None,
    ) -> torch.Tensor | None:
        """``causal_conv1d`` of a decode step (one input per request: ``x`` (B, C)) that reads
        each request's window from the pool and writes the window after the token back, or None
        where these kernels have no such path (the caller then gathers the windows, runs
        ``causal_conv1d`` and writes the final windows back).

        Request ``i`` continues from ``pool[read_slots[i]]`` (zeros where ``prefix_lens[i] == 0``);
        its window after the token goes to ``pool[write_slots[i]]`` in the pool's dtype. Device
        work only: it runs inside a captured CUDA graph.

        :param pool: (slots, C, K-1), the layer's windows (``StatePool.conv[state_id]``).
        :returns: out (B, C) in x's dtype, or None.
        """
        return None
