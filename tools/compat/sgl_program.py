"""An sglang frontend program against a hinge server (tools/compat/run.sh): ``sgl.gen`` plain,
with ``choices`` (RuntimeEndpoint.select: prefill-only input logprobs) and with ``regex``."""

from __future__ import annotations

import re
import sys

import sglang as sgl


@sgl.function
def program(s):
    s += "def add(a, b):\n    return"
    s += sgl.gen("body", max_tokens=8, temperature=0)
    s += "\n# answer: "
    s += sgl.gen("pick", choices=["yes", "no", "maybe"])
    s += "\n# number: "
    s += sgl.gen("number", max_tokens=8, regex=r"[0-9]{1,3}", temperature=0)


def main() -> int:
    sgl.set_default_backend(sgl.RuntimeEndpoint(sys.argv[1]))
    state = program.run()
    print("gen:", repr(state["body"]))
    print("choices:", repr(state["pick"]))
    print("regex:", repr(state["number"]))
    ok = state["pick"] in ("yes", "no", "maybe") and re.fullmatch(r"[0-9]{1,3}", state["number"])
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
