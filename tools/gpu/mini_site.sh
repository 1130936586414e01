#!/usr/bin/env bash
# The wheels a kernel benchmark lane needs on the offline CUDA host beside the packages it has
# (hinge's core imports pydantic), for its CPython 3.12, into .gpuhost/mini/ (git-ignored, ~2.6 MB):
# one device call instead of the whole gpu-host pack's two or three.
#
#   bash tools/gpu/mini_site.sh                      # here
#   # on the device, with carry [".gpuhost/mini"]:
#   mkdir -p /tmp/mini && for w in .gpuhost/mini/*.whl; do python3 -m zipfile -e "$w" /tmp/mini; done
#   export PYTHONPATH=/tmp/mini:$PWD/core:$PWD/plugins/quant_nvfp4
#   OUT=$OUT bash tools/gpu/open_issue_checks.sh pdl21
#
# Run that way (2026-12-06): nvfp4_launch_chain.py, nvfp4_trace.py, read_ceiling.py, and after
# `python3 -m pip install -q -e . --no-deps --no-build-isolation` (the plugins' entry points)
# kernel: mma's GPU tests (test_mma_kernel.py). The engine end to end, the server, the fa4 and
# flashinfer tests need the whole pack (../shared/gpu-host/pack.sh).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out="$root/.gpuhost/mini"
grep -qxF '/.gpuhost/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpuhost/' >> "$root/.git/info/exclude"
# pydantic and pydantic-core as installed here (they pin each other), the rest as pydantic asks
pins=$(python3 -c 'import pydantic, pydantic_core; print(f"pydantic=={pydantic.VERSION} pydantic-core=={pydantic_core.__version__}")')
rm -rf "$out"; mkdir -p "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$out" $pins annotated-types typing-inspection typing-extensions
ls "$out"
