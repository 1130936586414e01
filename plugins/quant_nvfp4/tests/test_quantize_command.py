"""``hinge quantize --method nvfp4``: ModelOpt's bytes for ModelOpt's amax, an output hinge
loads, and user errors as one line with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from nvfp4_helpers import FIXTURES, logits, nvfp4
from safetensors.torch import load_file

from hinge.models import load_model


def main(argv: list[str]) -> int:
    """``hinge ARGV`` in a subprocess (plugins do not import hinge.cli); stderr passed through."""
    run = subprocess.run([sys.executable, "-m", "hinge.cli", *argv], capture_output=True, text=True, timeout=300)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    return run.returncode


def modelopt_amax(arch: str, tmp_path):
    """ModelOpt's calibrated input amax in --input-amax form (its experts' shared quantizers ->
    ``<experts>.w13`` / ``.w2``)."""
    amax = json.loads((FIXTURES / arch / "input_amax.json").read_text())
    renamed = {k.replace(".gate_up_proj_input_quantizer", ".w13").replace(".down_proj_input_quantizer", ".w2"): v
               for k, v in amax.items()}
    path = tmp_path / "amax.json"
    path.write_text(json.dumps(renamed))
    return path


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if a.element_size() == 1 else torch.equal(a, b)


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_same_codes_and_scales_as_modelopt_for_the_same_amax(arch, tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["quantize", "--method", "nvfp4", str(FIXTURES / arch / "source"), str(out),
                   "--input-amax", str(modelopt_amax(arch, tmp_path))])
    assert status == 0, capsys.readouterr().err
    ours, theirs = load_file(out / "model.safetensors"), load_file(FIXTURES / arch / "modelopt" / "model.safetensors")
    kv = {k for k in theirs if k.endswith((".k_scale", ".v_scale"))}  # hinge quantize writes no KV scales
    assert set(ours) == set(theirs) - kv
    assert [k for k in ours if not same_bytes(ours[k], theirs[k])] == []
    exclude = json.loads((out / "hf_quant_config.json").read_text())["quantization"]["exclude_modules"]
    expected = json.loads((FIXTURES / arch / "modelopt" / "hf_quant_config.json").read_text())
    assert sorted(exclude) == sorted(expected["quantization"]["exclude_modules"])
    model = load_model(out, device="cpu", dtype=torch.float32, quantizer=nvfp4(), progress=False)
    assert torch.isfinite(logits(model, [[3, 4, 5, 6]])).all()


def test_an_already_quantized_source_is_one_error_line_and_exit_2(tmp_path, capsys):
    status = main(["quantize", "--method", "nvfp4", str(FIXTURES / "qwen3" / "modelopt"), str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("hinge: error:") and "already quantized" in err[0]


def test_a_non_empty_destination_is_refused(tmp_path, capsys):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("x")
    status = main(["quantize", "--method", "nvfp4", str(FIXTURES / "qwen3" / "source"), str(tmp_path / "o"),
                   "--input-amax", str(modelopt_amax("qwen3", tmp_path))])
    assert status == 2 and "not empty" in capsys.readouterr().err


def test_quantize_is_a_plugin_command_listed_by_hinge_help(capsys):
    assert main(["--help"]) == 0
    assert "quantize" in capsys.readouterr().out
