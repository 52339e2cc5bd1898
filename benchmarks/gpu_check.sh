#!/bin/bash
# Every GPU figure of the README's "On a GPU" in one call of a lent GPU machine (about 6 min on
# an H100 with 16 cores): the call floor by timing method, the GPU tests, the bundled CUDA
# builds (alone and five at once, in the background) and fixtures, level 1's references at full
# size against KernelBench's published times, and two problems through the harness at full size.
#
#   bash benchmarks/gpu_check.sh KB OUT
#
# KB: a folder with level1/ (KernelBench's problems) and, optionally, published.json (its
# results/timing/<GPU>/baseline_time_torch.json; neither is bundled here). OUT: where the logs
# and JSON go. Wheels of packages the machine lacks (pydantic, openai, ...) may wait in .whl/.
set -u
KB=${1:?KB folder}; OUT=${2:?OUT folder}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/maxcode-site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD/src:$PWD:/tmp/maxcode-site PYTHONUNBUFFERED=1
export MAXCODE_HOME=${MAXCODE_HOME:-/tmp/maxcode-gpu-home}
echo "== machine $(date +%T)"
nvidia-smi -L; nproc
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 60 python3 -m maxcode doctor 2>&1 | head -12
echo "== call floor $(date +%T)"
timeout 60 python3 benchmarks/gpu_floor.py --json "$OUT/floor.json"
echo "== builds, in the background $(date +%T)"
(timeout 300 python3 benchmarks/gpu_fixtures.py --builds --json "$OUT/builds.json" \
  > "$OUT/builds.txt" 2>&1) &
builds=$!
echo "== level 1 references at full size $(date +%T)"
timeout 200 python3 benchmarks/kernelbench_levels.py "$KB/level1" --out "$OUT/level1.json"
if [ -f "$KB/published.json" ]; then
  python3 benchmarks/kernelbench_levels.py --compare "$OUT/level1.json" "$KB/published.json" \
    > "$OUT/compare.txt"; tail -12 "$OUT/compare.txt"
fi
echo "== GPU tests (no builds) $(date +%T)"
MAXCODE_TEST_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -n 0 -m gpu -s \
  tests/evaluate/test_kernelbench_triton.py tests/evaluate/test_kernelbench_examples.py \
  -k "triton or side_stream or speed_of_light" 2>&1 | tail -15
echo "== builds $(date +%T)"
wait $builds; cat "$OUT/builds.txt"
echo "== CUDA fixtures $(date +%T)"
timeout 200 python3 benchmarks/gpu_fixtures.py --evaluate --backends cuda --json "$OUT/evals.json"
echo "== through the harness at full size $(date +%T)"
timeout 200 python3 benchmarks/kernelbench_public.py "$KB" --levels 1 --only level1/1,level1/19 \
  --scale 1 --device cuda --rounds 1 --jsonl "$OUT/full.jsonl"
echo "== done $(date +%T)"
