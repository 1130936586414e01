"""What every contract class shares: the ``spec``/``options``/``component`` fixtures and how a
component is built for a test (its own factory, a real BuildContext)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hinge.plugins.specs import BuildContext, ComponentSpec

#: absolute tolerance against the float64 oracle, per dtype
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def cuda_available() -> bool:
    return torch.cuda.is_available()


def skip_unless_cuda_claimed(spec: ComponentSpec) -> None:
    """Skip unless ``spec`` claims the cuda device and a GPU is here to check the claim."""
    if "cuda" not in spec.capabilities.devices:
        pytest.skip(f"{spec.name!r} does not claim cuda")
    if not cuda_available():
        pytest.skip("the cuda claim is checked on a GPU (marker gpu)")


def skip_unless_graph_claimed(spec: ComponentSpec, phase: str) -> None:
    """Skip unless ``spec`` claims CUDA graphs for ``phase`` and a GPU is here to check it."""
    if not spec.capabilities.supports_graph(phase):
        pytest.skip(f"{spec.name!r} does not claim {phase}_graph")
    if "cuda" not in spec.capabilities.devices:
        pytest.skip(f"{spec.name!r} does not run on cuda: its graph claim is checked on cpu")
    if not cuda_available():
        pytest.skip("CUDA graph claims are checked on a GPU (marker gpu)")


def pick_device(spec: ComponentSpec) -> str:
    devices = spec.capabilities.devices
    if "cpu" in devices:
        return "cpu"
    if cuda_available():
        return "cuda"
    pytest.skip(f"{spec.kind} {spec.name!r} runs only on {', '.join(sorted(devices))}; no CUDA here")


def pick_dtype(spec: ComponentSpec) -> torch.dtype:
    dtypes = spec.capabilities.dtypes
    return torch.float32 if "float32" in dtypes else getattr(torch, sorted(dtypes)[0])


class ContractBase:
    """Subclass a contract and provide ``spec`` (or override ``component``)."""

    @pytest.fixture
    def spec(self) -> ComponentSpec:
        raise NotImplementedError(
            f"{type(self).__name__} must provide a `spec` fixture returning the component's spec "
            "(as its plugin registers it), or override the `component` fixture"
        )

    @pytest.fixture
    def options(self) -> dict[str, Any]:
        """Options the component is built with (validated by its options model)."""
        return {}

    @pytest.fixture
    def device(self, spec: ComponentSpec) -> str:
        return pick_device(spec)

    @pytest.fixture
    def dtype(self, spec: ComponentSpec) -> torch.dtype:
        return pick_dtype(spec)

    @pytest.fixture
    def page_size(self, spec: ComponentSpec) -> int:
        return 16

    @pytest.fixture
    def build_component(self, spec: ComponentSpec, options: dict[str, Any], device: str,
                        dtype: torch.dtype, page_size: int):
        """``build_component(**overrides)``: a fresh component from the spec's own factory."""

        def build(**overrides: Any) -> Any:
            ctx = dict(device=device, dtype=dtype, deterministic=False, page_size=page_size,
                       model_config=None)
            ctx.update(overrides)
            return spec.build(spec.validate_options(options), BuildContext(**ctx))

        return build

    @pytest.fixture
    def component(self, build_component) -> Any:
        return build_component()
