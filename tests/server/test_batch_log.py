"""sglang's serving stats lines (``Prefill batch.`` / ``Decode batch.``) at INFO on the
``hinge.server`` logger, from the fake engine: their fields, their cadence, silence when idle."""

from __future__ import annotations

import logging
import re

import pytest
from fake_engine import FakeEngine

from hinge.sampling_params import SamplingParams
from hinge.server.batch_log import BatchLog
from hinge.server.monitor import EngineMonitor
from hinge.server.server_metrics import ServerMetrics

PREFILL = re.compile(r"^Prefill batch\. #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+), "
                     r"token usage: (\d+\.\d\d), #running-req: (\d+), #queue-req: (\d+)$")
DECODE = re.compile(r"^Decode batch\. #running-req: (\d+), #token: (\d+), token usage: "
                    r"(\d+\.\d\d), gen throughput \(token/s\): (\d+\.\d\d), #queue-req: (\d+)$")


def monitored(interval: int, **kwargs) -> EngineMonitor:
    return EngineMonitor(FakeEngine(**kwargs), ServerMetrics(), decode_log_interval=interval)


def add(mon: EngineMonitor, rid: str, prompt: str, max_new_tokens: int) -> None:
    mon.add_request([ord(c) for c in prompt],
                    SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True), rid)


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "hinge.server" and r.levelno == logging.INFO]


def test_a_step_that_admits_requests_logs_one_prefill_line_with_their_counts(caplog):
    caplog.set_level(logging.INFO, logger="hinge.server")
    mon = monitored(interval=0, max_running=2)
    add(mon, "a", "hello", 8)
    add(mon, "b", "abc", 8)
    add(mon, "c", "xy", 8)  # waits: two run at a time
    mon.step()
    (line,) = lines(caplog)
    fields = PREFILL.match(line)
    assert fields, line
    stats = mon.engine.stats()
    assert [int(x) for x in fields.group(1, 2, 3, 5, 6)] == [2, 5 + 3, 0, 2, 1]
    assert float(fields.group(4)) == pytest.approx(
        stats["kv_tokens_used"] / stats["kv_tokens_total"], abs=0.005)


def test_decode_lines_come_every_n_decode_steps_with_kv_tokens_and_queue(caplog):
    caplog.set_level(logging.INFO, logger="hinge.server")
    mon = monitored(interval=3)
    add(mon, "a", "ab", 20)
    add(mon, "b", "cd", 20)
    mon.step()  # prefill: first tokens only, not a decode step
    for _ in range(7):
        mon.step()
        if len(lines(caplog)) == 3:  # the prefill line and two decode lines
            break
    decode = [DECODE.match(line) for line in lines(caplog) if line.startswith("Decode")]
    assert len(decode) == 2 and mon.engine.steps == 1 + 6  # after decode steps 3 and 6
    assert all(decode), lines(caplog)
    running, tokens, _, _, queued = decode[-1].groups()
    used = mon.engine.stats()["kv_tokens_used"]
    assert (int(running), int(tokens), int(queued)) == (2, used, 0)


def test_nothing_is_logged_while_idle_and_interval_0_turns_decode_lines_off(caplog):
    caplog.set_level(logging.INFO, logger="hinge.server")
    idle = monitored(interval=1)
    for _ in range(5):
        idle.step()
    assert lines(caplog) == []
    quiet = monitored(interval=0)
    add(quiet, "a", "ab", 10)
    while quiet.has_unfinished():
        quiet.step()
    assert [line.split(".")[0] for line in lines(caplog)] == ["Prefill batch"]


def test_a_negative_interval_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="decode_log_interval must be >= 0"):
        BatchLog(-1)
