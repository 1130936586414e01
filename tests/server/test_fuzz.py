"""Property test over the app's own OpenAPI schema: no generated request gets a 5xx.

schemathesis generates schema-valid (positive) and schema-violating (negative) requests for
every operation; each is sent to the real server. The number of cases run is printed.
"""

from __future__ import annotations

import collections
import os
import time

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.openapi import from_dict
from server_helpers import wait_until_idle

#: per operation and mode (routes without inputs give one case); HINGE_FUZZ_EXAMPLES=200 for a
#: longer hunt.
EXAMPLES_PER_MODE = int(os.environ.get("HINGE_FUZZ_EXAMPLES", "20"))


def test_no_generated_request_gets_a_server_error(server):
    schema = from_dict(httpx.get(server.base_url + "/openapi.json", headers=server.headers).json())
    statuses: collections.Counter = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz(server, op, mode, statuses, failures)
            except Unsatisfiable:  # no way to violate the schema of a route without inputs
                assert mode is GenerationMode.NEGATIVE, op.path
    total = sum(statuses.values())
    elapsed = time.monotonic() - started
    by_status = collections.Counter()
    for (_, status), n in statuses.items():
        by_status[status] += n
    print(f"\nschemathesis: {total} cases over {len({p for p, _ in statuses})} routes in "
          f"{elapsed:.1f}s; by status: {dict(sorted(by_status.items()))}")
    assert not failures, "\n".join(failures[:10])
    assert total >= 100, f"only {total} cases ran"
    wait_until_idle(server, timeout=60)


def _fuzz(server, op, mode, statuses: collections.Counter, failures: list[str]) -> None:
    @settings(max_examples=EXAMPLES_PER_MODE, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def check(case) -> None:
        resp = case.call(base_url=server.base_url, headers=server.headers, timeout=60)
        statuses[(op.path, resp.status_code)] += 1
        if resp.status_code >= 500:
            failures.append(f"{op.method.upper()} {op.path} {mode.value}: {resp.status_code} "
                            f"{resp.text[:300]} for body {case.body!r}")

    check()
