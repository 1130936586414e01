"""Regenerate the ModelOpt NVFP4 fixtures of plugins/quant_nvfp4/tests/fixtures/ with ModelOpt itself.

Runs in a separate virtual environment that holds nvidia-modelopt (never hinge's own: modelopt
must not replace hinge's torch), on CPU:

    python -m venv /tmp/modelopt-venv
    /tmp/modelopt-venv/bin/pip install /path/to/torch-2.13.0+cpu-*.whl     # the same torch as hinge
    /tmp/modelopt-venv/bin/pip install --no-deps nvidia-modelopt==0.47.0
    /tmp/modelopt-venv/bin/pip install packaging numpy tqdm pyyaml pydantic regex rich \
        safetensors omegaconf requests pulp scipy transformers==<hinge's transformers version>
    /tmp/modelopt-venv/bin/python tools/nvfp4_modelopt_fixture.py plugins/quant_nvfp4/tests/fixtures

For each architecture (a tiny seeded Qwen3 and Qwen3-MoE, bf16) it writes
``<arch>/source/`` (the bf16 checkpoint ModelOpt quantized), ``<arch>/modelopt/`` (ModelOpt's
``export_hf_checkpoint`` output: NVFP4 weights, FP8 KV scales, ``hf_quant_config.json``) and
``<arch>/input_amax.json`` (each quantized linear's calibrated input amax, which hinge is given
so that its ``input_scale`` can be compared byte for byte). Calibration: ModelOpt's ``max``
algorithm (``NVFP4_DEFAULT_CFG`` + ``FP8_KV_CFG``) over seeded random token ids.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch


def tiny_config(arch: str):
    from transformers import Qwen3Config, Qwen3MoeConfig

    common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, torch_dtype="bfloat16", eos_token_id=1, bos_token_id=None)
    if arch == "qwen3":
        return Qwen3Config(intermediate_size=96, **common)
    return Qwen3MoeConfig(intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                          num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                          mlp_only_layers=[], **common)


def build(arch: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(tiny_config(arch), dtype=torch.float32)
    with torch.no_grad():  # larger, varied weights than the init's 0.02 std (more codes in use)
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "embed" not in name:
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5, generator=None)
                p.mul_(torch.exp(torch.randn(p.shape[:-1]) * 0.5).unsqueeze(-1))
    return model.to(torch.bfloat16).eval()


def input_amaxes(model) -> dict[str, float]:
    out = {}
    for name, module in model.named_modules():
        q = getattr(module, "input_quantizer", None)
        if q is not None and getattr(q, "is_enabled", False) and getattr(q, "amax", None) is not None:
            amax = q.amax
            out[name] = amax.float().tolist() if amax.numel() > 1 else float(amax.float())
        # transformers 5 fused experts: one input quantizer per projection, shared by all experts
        for attr in ("gate_up_proj_input_quantizer", "down_proj_input_quantizer"):
            q = getattr(module, attr, None)
            if q is not None and getattr(q, "amax", None) is not None:
                out[f"{name}.{attr}"] = float(q.amax.float())
    return out


def main(out_dir: str) -> int:
    import modelopt
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    root = Path(out_dir)
    for arch in ("qwen3", "qwen3_moe"):
        model = build(arch)
        src = root / arch / "source"
        model.save_pretrained(src, safe_serialization=True)
        cfg = copy.deepcopy(mtq.NVFP4_DEFAULT_CFG)
        cfg["quant_cfg"] = list(cfg["quant_cfg"]) + list(copy.deepcopy(mtq.FP8_KV_CFG)["quant_cfg"])
        gen = torch.Generator().manual_seed(7)
        batches = [torch.randint(2, 128, (2, 24), generator=gen) for _ in range(4)]

        def forward_loop(m, batches=batches):
            with torch.no_grad():
                for ids in batches:
                    m(input_ids=ids)

        mtq.quantize(model, cfg, forward_loop)
        (root / arch).mkdir(parents=True, exist_ok=True)
        (root / arch / "input_amax.json").write_text(json.dumps(input_amaxes(model), indent=1) + "\n")
        export_hf_checkpoint(model, dtype=torch.bfloat16, export_dir=root / arch / "modelopt")
        (root / arch / "PROVENANCE").write_text(
            f"written by tools/nvfp4_modelopt_fixture.py with nvidia-modelopt {modelopt.__version__}, "
            f"torch {torch.__version__}, on CPU\n")
        print(f"{arch}: wrote {root / arch}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "plugins/quant_nvfp4/tests/fixtures"))
