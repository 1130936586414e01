"""The real ``hinge`` CLI in a subprocess, on a tiny seeded checkpoint; transformers is the oracle."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hinge.builtin import random_model_path
from hinge.engine.tokenizer import Tokenizer


def hinge(*args: str, env: dict[str, str] | None = None, stdin: str | None = None
          ) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HINGE_")}
    return subprocess.run([sys.executable, "-m", "hinge.cli", *args], capture_output=True,
                          text=True, env={**base, **(env or {})}, input=stdin, timeout=300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return random_model_path(tmp_path_factory.mktemp("model"))


def hf_greedy_text(model_dir: Path, prompt_ids: list[int], new_tokens: int) -> str:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, pad_token_id=0)
    return Tokenizer.from_pretrained(model_dir).decode(out[0, len(prompt_ids):].tolist())


class TestGenerate:
    def test_greedy_generate_prints_what_transformers_generates(self, model_dir: Path) -> None:
        prompt = "def fibonacci(n):"
        run = hinge("generate", "--model", str(model_dir), prompt, "--max-new-tokens", "12",
                    "--ignore-eos")
        assert run.returncode == 0, run.stderr
        ids = Tokenizer.from_pretrained(model_dir).encode(prompt)
        assert run.stdout[:-1] == hf_greedy_text(model_dir, ids, 12)
        from hinge import LLM, SamplingParams

        with LLM(str(model_dir)) as llm:
            [out] = llm.generate([prompt], SamplingParams(max_new_tokens=12, temperature=0.0,
                                                          ignore_eos=True))
        assert run.stdout[:-1] == out.text
        assert "12 output tokens" in run.stderr and "finish_reason=length" in run.stderr

    def test_chat_stream_from_stdin_prints_the_greedy_reply_to_the_templated_prompt(
            self, model_dir: Path) -> None:
        run = hinge("generate", "--model", str(model_dir), "-", "--chat", "--stream",
                    "--max-new-tokens", "10", "--ignore-eos", stdin="hello there")
        assert run.returncode == 0, run.stderr
        ids = Tokenizer.from_pretrained(model_dir).apply_chat_template(
            [{"role": "user", "content": "hello there"}])
        assert run.stdout[:-1] == hf_greedy_text(model_dir, ids, 10)

    def test_stream_writes_text_step_by_step_and_joins_to_the_final_text(self, model_dir: Path
                                                                        ) -> None:
        from hinge.cli import run_request
        from hinge.config import load_config
        from hinge.engine.engine import Engine
        from hinge.sampling_params import SamplingParams

        class Recorder(io.StringIO):
            writes = 0

            def write(self, s: str) -> int:
                self.writes += 1
                return super().write(s)

        engine = Engine(load_config(env={}, overrides={"model": str(model_dir)}), progress=False)
        try:
            sink = Recorder()
            params = SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
            out = run_request(engine, engine.tokenizer.encode("import os\n"), params, stream=sink)
        finally:
            engine.close()
        assert sink.getvalue() == out.text and len(out.token_ids) == 16
        assert sink.writes > 3, "streaming wrote everything at once"


class TestPluginsAndPlan:
    def test_plugins_json_lists_the_builtin_plugin_and_its_components(self) -> None:
        run = hinge("plugins", "--json")
        assert run.returncode == 0, run.stderr
        listing = {p["name"]: p for p in json.loads(run.stdout)}
        builtin = listing["hinge"]
        assert builtin["status"] == "ok" and builtin["error"] is None
        names = {(c["kind"], c["name"]) for c in builtin["components"]}
        assert {("attention", "torch"), ("quantizer", "none"), ("cache", "none")} <= names

    def test_plan_json_shows_every_graph_decision_with_reasons(self) -> None:
        run = hinge("plan", "--json")
        assert run.returncode == 0, run.stderr
        plan = json.loads(run.stdout)
        assert plan["attention"]["name"] == "torch"
        for phase in ("prefill", "decode", "draft"):
            decision = plan["graphs"][phase]
            assert decision["enabled"] is False and decision["reasons"], decision
        assert any("cpu" in r for r in plan["graphs"]["decode"]["reasons"])

    def test_flag_beats_env_beats_yaml(self, tmp_path: Path) -> None:
        (tmp_path / "hinge.yaml").write_text("dtype: float16\npage_size: 32\n")
        cfg = str(tmp_path / "hinge.yaml")
        env = {"HINGE_DTYPE": "bfloat16"}
        plan = json.loads(hinge("plan", "--json", "--config", cfg).stdout)
        assert (plan["dtype"], plan["page_size"]) == ("float16", 32)
        plan = json.loads(hinge("plan", "--json", "--config", cfg, env=env).stdout)
        assert (plan["dtype"], plan["page_size"]) == ("bfloat16", 32)
        plan = json.loads(hinge("plan", "--json", "--config", cfg, "--dtype", "float32",
                                "--page-size", "64", env=env).stdout)
        assert (plan["dtype"], plan["page_size"]) == ("float32", 64)


class TestUserErrorsExitTwo:
    @pytest.mark.parametrize("args, message", [
        (["plan", "--attention", "nope"], "unknown attention backend 'nope'"),
        (["plan", "--page-size", "0"], "page_size"),
        (["plan", "--config", "/no/such.yaml"], "config file /no/such.yaml does not exist"),
        (["generate", "hi", "--model", "/no/such/model"], "model directory '/no/such/model' does not exist"),
        (["generate", "hi", "--top-p", "5"], "top_p must be in (0, 1]"),
        (["generate", "hi", "--temperature", "warm"], "--temperature: invalid float value"),
        (["bench", "--kv-cache-bytes", "lots"], "expected a size like"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        pytest.param(["generate", "hi", "--device", "cuda"], "device 'cuda' was selected",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has CUDA")),
    ])
    def test_bad_input_prints_a_clear_message_and_no_traceback(self, args: list[str],
                                                               message: str) -> None:
        run = hinge(*args)
        assert run.returncode == 2, (run.stdout, run.stderr)
        assert message in run.stderr
        assert "Traceback" not in run.stderr

    def test_unknown_yaml_key_suggests_the_right_one(self, tmp_path: Path) -> None:
        (tmp_path / "hinge.yaml").write_text("page_sise: 32\n")
        run = hinge("plan", "--config", str(tmp_path / "hinge.yaml"))
        assert run.returncode == 2 and "did you mean 'page_size'" in run.stderr
        assert "Traceback" not in run.stderr

    def test_model_dir_without_config_json_names_the_file(self, tmp_path: Path) -> None:
        run = hinge("generate", "hi", "--model", str(tmp_path))
        assert run.returncode == 2, run.stderr
        assert "config.json" in run.stderr and "Traceback" not in run.stderr


class TestLogsVersionAndThreads:
    BANNER = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d INFO hinge\.startup: (.*)$", re.MULTILINE)

    def banner(self, stderr: str) -> list[str]:
        return self.BANNER.findall(stderr)

    def test_version_prints_hinge_and_the_installed_version(self) -> None:
        import importlib.metadata

        run = hinge("--version")
        assert run.returncode == 0, run.stderr
        assert run.stdout == f"hinge {importlib.metadata.version('hinge-llm')}\n"

    def test_generate_logs_the_banner_on_stderr_and_keeps_stdout_for_the_text(self, model_dir: Path
                                                                             ) -> None:
        from hinge.threads import choose_cpu_threads, usable_cores

        args = ("generate", "--model", str(model_dir), "import os", "--max-new-tokens", "6",
                "--ignore-eos")
        run = hinge(*args)
        assert run.returncode == 0, run.stderr
        lines = self.banner(run.stderr)
        assert lines[1].startswith(f"model: {model_dir} (Qwen3ForCausalLM, weights ")
        assert "plan: attention: torch (plugin hinge, distribution hinge-llm 0.1.0)" in lines
        assert any(line.startswith("KV cache: ") for line in lines)
        assert any(line.startswith("concurrency: max_running_requests 64, ") for line in lines)
        expected = choose_cpu_threads(None, os.environ, usable_cores())
        assert lines[-1] == f"torch threads: {expected.count} (auto: {expected.reason})"
        quiet = hinge(*args, env={"HINGE_LOG_LEVEL": "warning"})
        assert quiet.returncode == 0 and self.banner(quiet.stderr) == []
        assert run.stdout == quiet.stdout and "hinge.startup" not in run.stdout

    def test_log_level_flag_beats_env_and_cpu_threads_flag_beats_omp(self, model_dir: Path) -> None:
        run = hinge("generate", "--model", str(model_dir), "hi", "--max-new-tokens", "2",
                    "--log-level", "info", "--cpu-threads", "1",
                    env={"HINGE_LOG_LEVEL": "error", "OMP_NUM_THREADS": "2"})
        assert run.returncode == 0, run.stderr
        assert self.banner(run.stderr)[-1] == \
            "torch threads: 1 (cpu_threads: set in the config / --cpu-threads)"

    def test_log_level_debug_shows_debug_records(self) -> None:
        run = hinge("plan", "--log-level", "debug")
        assert run.returncode == 0, run.stderr
        assert re.search(r"^\d\d-\d\d \d\d:\d\d:\d\d DEBUG hinge\.plugins\.manager: plugin 'hinge' "
                         r"\(distribution hinge-llm [^)]*\): ok, components: attention torch",
                         run.stderr, re.MULTILINE), run.stderr
        assert "DEBUG" not in hinge("plan").stderr

    @pytest.mark.parametrize("args, env, message", [
        (["plan"], {"HINGE_LOG_LEVEL": "loud"},
         "hinge: error: HINGE_LOG_LEVEL must be one of debug, info, warning, error; got 'loud'"),
        (["plan", "--log-level", "loud"], {}, "argument --log-level: invalid choice: 'loud'"),
        (["plan", "--cpu-threads", "0"], {}, "expected a positive integer or auto, got '0'"),
    ])
    def test_bad_log_level_or_thread_count_exits_2(self, args: list[str], env: dict[str, str],
                                                   message: str) -> None:
        run = hinge(*args, env=env)
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert "Traceback" not in run.stderr


def test_prefix_cache_flags_reach_the_engine_config() -> None:
    """--track-interval and --checkpoint-slots set the EngineConfig fields (CLI > env)."""
    from hinge.cli import build_parser, config_from_args

    args = build_parser().parse_args(["plan", "--track-interval", "128", "--checkpoint-slots", "9"])
    config = config_from_args(args)
    assert (config.track_interval, config.checkpoint_slots) == (128, 9)
