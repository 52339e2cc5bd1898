#!/usr/bin/env bash
# Everything maxcode and its tests need on a fresh Debian/Ubuntu machine:
# system tools (compiler, bubblewrap sandbox, valgrind, chromium for the report tests) and the
# Python package with its extras.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v g++ >/dev/null || need+=(g++)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v valgrind >/dev/null || need+=(valgrind)
command -v cmake >/dev/null || need+=(cmake)  # the CMake example project (examples/project)
command -v chromium >/dev/null || need+=(chromium)  # the report tests render pages headless
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing system packages: ${need[*]}" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# torch first, pinned: the CPU build this machine image carries; nothing may pull a newer one.
python3 -m pip install -q --disable-pip-version-check "torch==2.13.0"
python3 -m pip install -q --disable-pip-version-check -e ".[dev,docs,anthropic,ray,train,torch,triton]"
