"""``hinge bench --random-weights``: the published presets, --model-config, random-id prompts
and the run end to end on the CPU with the tiny presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hinge.bench import PRESETS, preset_config, random_id_prompts, read_model_config
from hinge.bench.inprocess import NOT_COMPARED
from hinge.bench.random_model import write_random_model
from hinge.cli import main


def _parameters(directory: Path) -> tuple[int, int]:
    """(hinge, transformers) parameter counts of the model in ``directory``, built on meta."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from hinge.config import EngineConfig
    from hinge.layers.linear import TensorParallel
    from hinge.models.loader import load_config
    from hinge.plugins.manager import get_plugin_manager
    from hinge.plugins.plan import resolve_plan

    config = EngineConfig(model=str(directory), device="cpu")
    plan = resolve_plan(config, get_plugin_manager(config.plugins))
    cls, model_config = load_config(directory)
    with torch.device("meta"):
        ours = cls(model_config, quantizer=plan.build_quantizer(plan.build_context()),
                   dtype=torch.bfloat16, deterministic=False, tp=TensorParallel(0, 1))
        theirs = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory),
                                                  dtype=torch.bfloat16)
    return (sum(p.numel() for p in ours.parameters()),
            sum(p.numel() for p in theirs.parameters()))


class TestPresets:
    def test_every_preset_builds_the_same_shapes_in_hinge_and_transformers(
            self, tmp_path: Path) -> None:
        for arch, sizes in PRESETS.items():
            for size in sizes:
                directory = write_random_model(tmp_path / f"{arch}-{size}",
                                               preset_config(arch, size))
                ours, theirs = _parameters(directory)
                assert ours == theirs, (arch, size, ours, theirs)

    def test_published_sizes_have_their_published_parameter_counts(self, tmp_path: Path) -> None:
        # the model cards' totals, to the precision they give (transformers counts them here)
        published = {("qwen3", "0.6b"): 0.6, ("qwen3", "1.7b"): 1.7, ("qwen3", "4b"): 4.0,
                     ("qwen3", "8b"): 8.2, ("qwen3", "14b"): 14.8, ("qwen3", "32b"): 32.8,
                     ("qwen3_moe", "30b-a3b"): 30.5, ("qwen3_5", "9b"): 9.0,
                     ("llama", "3b"): 3.2, ("llama", "8b"): 8.0}
        for (arch, size), billions in published.items():
            _, theirs = _parameters(write_random_model(tmp_path / f"{arch}-{size}",
                                                       preset_config(arch, size)))
            assert round(theirs / 1e9, 1) == billions, (arch, size, theirs)

    def test_qwen3_8b_is_the_published_configuration(self) -> None:
        config = preset_config("qwen3", "8b")
        assert config == preset_config("qwen3")  # the default size
        expected = {"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
                    "vocab_size": 151936, "rope_theta": 1e6, "max_position_embeddings": 40960,
                    "tie_word_embeddings": False, "architectures": ["Qwen3ForCausalLM"]}
        assert {k: config[k] for k in expected} == expected

    def test_the_hybrid_presets_alternate_three_deltanet_layers_and_one_attention_layer(
            self) -> None:
        for size in PRESETS["qwen3_5"]:
            types = preset_config("qwen3_5", size)["layer_types"]
            assert types == ["linear_attention"] * 3 + ["full_attention"] + types[4:]
            assert types.count("linear_attention") == 3 * types.count("full_attention")

    def test_unknown_arch_or_size_lists_the_choices(self) -> None:
        with pytest.raises(ValueError, match="qwen3, qwen3_moe, qwen3_5, llama"):
            preset_config("gpt2", "8b")
        with pytest.raises(ValueError, match="tiny, 0.6b, 1.7b, 4b, 8b, 14b, 32b"):
            preset_config("qwen3", "9b")

    def test_a_preset_is_a_copy_the_caller_may_change(self) -> None:
        preset_config("qwen3_5", "9b")["layer_types"].clear()
        assert len(preset_config("qwen3_5", "9b")["layer_types"]) == 32


class TestModelConfigFile:
    def test_a_bad_config_file_is_named_with_what_is_wrong(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="nope.json does not exist"):
            read_model_config(tmp_path / "nope.json")
        (tmp_path / "bad.json").write_text("{")
        with pytest.raises(ValueError, match="bad.json is not valid JSON"):
            read_model_config(tmp_path / "bad.json")
        (tmp_path / "gpt.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
        with pytest.raises(ValueError, match="unsupported architecture.*gpt.json"):
            read_model_config(tmp_path / "gpt.json")


def test_random_id_prompts_are_seeded_and_reach_beyond_the_tokenizer_below_the_vocabulary(
        ) -> None:
    prompts = random_id_prompts(12000, 20, 8, 32, seed=5)
    assert prompts == random_id_prompts(12000, 20, 8, 32, seed=5)
    ids = [t for p in prompts for t in p]
    assert all(0 <= t < 12000 for t in ids) and max(ids) >= 8192  # the tokenizer has 8192
    assert {len(p) for p in prompts} <= set(range(8, 33))


@pytest.mark.parametrize("arch", list(PRESETS))
def test_random_weights_run_end_to_end_on_the_cpu(
        arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["bench", "--random-weights", "--arch", arch, "--size", "tiny",
                   "--num-prompts", "3", "--input-len-range", "4,12", "--output-len", "4",
                   "--seed", "7", "--device", "cpu", "--disable-tqdm", "--json",
                   "--log-level", "warning"])
    out = capsys.readouterr()
    assert status == 0, out.err
    data = json.loads(out.out)
    (result,) = data["results"]
    prompts = random_id_prompts(12000, 3, 4, 12, seed=7)  # ids below the preset's vocabulary
    assert (result["completed"], result["failed"]) == (3, 0)
    assert result["input_tokens"] == sum(map(len, prompts))
    assert result["output_tokens"] == 3 * 4
    assert data["settings"]["random_weights"] is True and data["settings"]["arch"] == arch
    assert f"{arch} tiny preset with random weights" in data["settings"]["model"]
    # the engine built the preset: transformers' model of the same config.json has as many
    _, theirs = _parameters(write_random_model(tmp_path, preset_config(arch, "tiny")))
    assert data["settings"]["parameters"] == theirs


def test_model_config_with_compare_hf_says_outputs_are_not_compared(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "config.json"
    file.write_text(json.dumps(preset_config("qwen3", "tiny")))
    status = main(["bench", "--model-config", str(file), "--num-prompts", "2",
                   "--input-len-range", "4,8", "--output-len", "3", "--compare-hf",
                   "--device", "cpu", "--disable-tqdm", "--json", "--log-level", "warning"])
    out = capsys.readouterr()
    assert status == 0, out.err
    data = json.loads(out.out)
    assert [r["name"] for r in data["results"]] == ["hinge", "transformers"]
    assert all(r["output_tokens"] == 6 for r in data["results"])
    assert data["identical_outputs"] is None and data["note"] == NOT_COMPARED
    assert NOT_COMPARED in out.err and "identical greedy outputs" not in out.err
    ours, theirs = data["results"]
    assert data["output_throughput_ratio"] == pytest.approx(
        ours["output_tok_s"] / theirs["output_tok_s"])
