"""hinge.testing.run_requests: every request to the end, outputs in prompt order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hinge.testing import run_requests


class BackwardsEngine:
    """Finishes the newest request first, one a step."""

    def __init__(self):
        self.queue = []

    def add_request(self, prompt, params):
        rid = f"r{len(self.queue)}"
        self.queue.append((rid, prompt, params))
        return rid

    def has_unfinished(self):
        return bool(self.queue)

    def step(self):
        rid, prompt, params = self.queue.pop()
        return [SimpleNamespace(rid=rid, finished=False),
                SimpleNamespace(rid=rid, finished=True, token_ids=prompt + [params])]


def test_outputs_come_back_in_prompt_order_whatever_order_requests_finish_in():
    outs = run_requests(BackwardsEngine(), [[1], [2, 3], [4]], ["a", "b", "c"])
    assert [o.token_ids for o in outs] == [[1, "a"], [2, 3, "b"], [4, "c"]]
    assert [o.token_ids[-1] for o in run_requests(BackwardsEngine(), [[1], [2]], "p")] == ["p", "p"]


def test_a_params_list_of_another_length_is_refused_naming_both_counts():
    with pytest.raises(ValueError, match="2 prompts but 3 SamplingParams"):
        run_requests(BackwardsEngine(), [[1], [2]], ["a", "b", "c"])
