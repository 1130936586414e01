"""Where a decode step's time goes: the kernels of a few engine steps, from the torch profiler.

``profile_decode(engine, prompts, params, steps)`` adds the requests, steps until every one of
them decodes, then profiles ``steps`` decode steps (CUDA activity: graph replays are listed kernel
by kernel). It returns per step: the host wall time between step returns, the device time the
kernels took (their sum), the kernel count, and the kernels grouped by name and by kind (GEMM,
attention, norm, recurrent, sampling, copies, other), each with us per step and launches per step.
The difference between the wall time and the kernel sum is time the device was idle: launch
gaps inside a graph, host work it waited for; ``host_top`` then says where the host's time
went (cProfile over as many more steps, the functions by their own time).

``profile_prefill(engine, prompt, params)`` does the same for whole one-token requests (the
time to first token).

    from step_profile import profile_decode, table   # from a sibling script (roofline.py --profile)
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

KINDS = (  # first match wins: FA4's CuTe kernels carry "cutlass" in their names too
    ("attention", r"flashinfer|attention|batchdecode|batchprefill|paged|fmha|flash"),
    ("gemm", r"gemm|gemv|nvjet|cutlass|xmma|cublas|_matmul|splitk|sm90_"),
    ("norm", r"rmsnorm|rms_norm|layer_norm|_norm_"),
    ("recurrent", r"delta|conv1d|fused_recurrent|chunk_|in_pool|recurrence"),
    ("sampling", r"argmax|topk|sort|softmax|multinomial|exponential|sampl|gather_logits|cumsum"),
    ("copy", r"copy|memcpy|memset|fill|index|scatter|gather|cat"),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def short(name: str, width: int = 70) -> str:
    name = re.sub(r"<.*", "<...>", name)  # templates say little and are long
    return name if len(name) <= width else name[: width - 3] + "..."


def profile_decode(engine: Any, prompts: list[list[int]], params: Any, steps: int = 16) -> dict[str, Any]:
    """Profile ``steps`` decode steps once every request of ``prompts`` decodes (see the module)."""
    from torch.profiler import ProfilerActivity, profile

    for p in prompts:
        engine.add_request(list(p), params)
    # prefill (and any chunk) first, then two decode steps so the pipeline (overlap) is steady
    for _ in range(64):
        engine.step()
        if all(r.num_output >= 2 for r in engine.scheduler.running) and not engine.scheduler.waiting:
            break
    torch.cuda.synchronize()
    stamps = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            engine.step()
            stamps.append(time.perf_counter())
        torch.cuda.synchronize()
    host = host_profile(engine.step, steps)
    for req in list(engine.scheduler.running) + list(engine.scheduler.waiting):
        engine.abort_request(req.rid)
    while engine.has_unfinished():  # the step in flight and the aborts' outputs
        engine.step()
    wall = (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1) * 1e6
    return {"host_top": host, "batch": len(prompts), "steps": steps, "wall_us_per_step": wall,
            **kernel_summary(prof, steps, wall)}


def profile_prefill(engine: Any, prompt: list[int], params: Any, reps: int = 3) -> dict[str, Any]:
    """Where the time to first token goes: ``reps`` requests of ``prompt`` one after another
    (``params`` should ask for one new token), each run until it finishes; kernels per request
    (torch profiler) and the host functions of as many more (cProfile). ``batch`` is 1 and a
    "step" is one whole request: its prefill and the step that returns its token."""
    from torch.profiler import ProfilerActivity, profile

    def one() -> None:
        engine.add_request(list(prompt), params)
        while engine.has_unfinished():
            engine.step()

    one()  # warm: nothing compiles inside the profile
    _sync()
    start = time.perf_counter()
    cuda = torch.cuda.is_available()  # (a CPU engine: no kernels, the host profile only)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            one()
        _sync()
    wall = (time.perf_counter() - start) / reps * 1e6
    return {"host_top": host_profile(one, reps), "batch": 1, "steps": reps, "wall_us_per_step": wall,
            "prompt_tokens": len(prompt), **kernel_summary(prof, reps, wall)}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def kernel_summary(prof: Any, steps: int, wall: float) -> dict[str, Any]:
    """The CUDA kernels of a torch profile per step: total, idle time, by kind and the top 20."""
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in kernels:
        entry = by_name[e.name]
        entry[0] += e.device_time_total  # us (a kernel event: its own time range)
        entry[1] += 1
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, (us, n) in by_name.items():
        by_kind[kind_of(name)][0] += us
        by_kind[kind_of(name)][1] += n
    busy = sum(us for us, _ in by_name.values()) / steps
    return {
        "kernel_us_per_step": busy, "idle_us_per_step": wall - busy,
        "kernels_per_step": len(kernels) / steps,
        "by_kind": {k: {"us": us / steps, "launches": n / steps}
                    for k, (us, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])},
        "top": [{"name": short(name), "kind": kind_of(name), "us": us / steps, "launches": n / steps}
                for name, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:20]],
    }


def host_profile(run: Any, steps: int, top: int = 15) -> list[dict[str, Any]]:
    """The host side of ``steps`` more calls of ``run`` (an engine step, a whole request) under
    cProfile: the functions that take the most time of their own, us per call (where the Python
    between two replays goes)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        run()
    prof.disable()
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]  # (cc, nc, tottime, cumtime, callers)
    return [{"function": f"{Path(file).name}:{line} {name}", "own_us": tt / steps * 1e6,
             "cum_us": ct / steps * 1e6, "calls": nc / steps}
            for (file, line, name), (_, nc, tt, ct, _) in rows]


def table(prof: dict[str, Any], title: str) -> str:
    lines = [f"\n{title}: batch {prof['batch']}, {prof['wall_us_per_step']:.0f} us per step "
             f"(kernels {prof['kernel_us_per_step']:.0f} us, device idle "
             f"{prof['idle_us_per_step']:.0f} us), {prof['kernels_per_step']:.0f} kernels per step",
             "| kind | us/step | launches/step |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v['us']:.0f} | {v['launches']:.0f} |" for k, v in prof["by_kind"].items()]
    lines += ["", "| kernel | kind | us/step | launches/step |", "| --- | --- | --- | --- |"]
    lines += [f"| `{t['name']}` | {t['kind']} | {t['us']:.1f} | {t['launches']:.0f} |" for t in prof["top"]]
    lines += ["", "| host function (cProfile) | own us/step | cumulative us/step | calls/step |",
              "| --- | --- | --- | --- |"]
    lines += [f"| `{h['function']}` | {h['own_us']:.0f} | {h['cum_us']:.0f} | {h['calls']:.1f} |"
              for h in prof.get("host_top", [])]
    return "\n".join(lines)
