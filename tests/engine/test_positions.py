"""The rotary table is sized once, to max_model_len, when the engine starts: no step grows it
(growing is work on the hot path, and a new table is a tensor a captured graph would not see)."""

from __future__ import annotations

from hinge import LLM, SamplingParams


def test_rotary_table_covers_max_model_len_at_start_and_no_step_replaces_it(tiny_qwen3):
    with LLM(str(tiny_qwen3), max_model_len=5000, chunked_prefill_size=64) as llm:
        rotary = llm.engine.model.rotary
        table = rotary._cos
        assert table.shape[0] >= 5000
        llm.generate([list(range(40, 240))], SamplingParams(max_new_tokens=8, ignore_eos=True))
        assert rotary._cos is table
