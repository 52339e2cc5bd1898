#!/bin/bash
# The GPU half of KernelBench at full size, in one call of a lent GPU machine (planned for at
# most 10 minutes on one H100/H200 with 16 cores; every step has its own time limit, and what
# finished is reported whatever ran out):
#
#   bash benchmarks/gpu_check.sh KB CORPUS OUT
#
# KB: a folder with level1/ and level2/ of KernelBench's problems (ScalingIntelligence/
# KernelBench; not bundled). CORPUS: a corpus of published kernels (one JSON object a line,
# as ../shared/corpora/cuda-l1/h100.jsonl; not bundled, carry a copy). OUT: where the report,
# the logs and the JSON go. Wheels of packages the machine lacks may wait in .whl/.
#
# Steps: the reward's clock (the GPU tests: a patched event timer, late side streams, work
# after the end marker, a CUDA graph on stale inputs, an honest copy), large-output problems
# at full size as identical candidates (outputs compared where they lie), a sample of the
# corpus against its published scores (builds beside the timing), and per evaluation the
# start-up, build, checks and timing seconds (in the JSON rows' phases). OUT/report.txt holds
# the summary lines of every step.
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "usage: bash benchmarks/gpu_check.sh KB CORPUS OUT"
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
  exit 0
fi
KB=${1:?KB folder}; CORPUS=${2:?corpus file}; OUT=${3:?OUT folder}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/maxcode-site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD/src:$PWD:/tmp/maxcode-site PYTHONUNBUFFERED=1
export MAXCODE_HOME=${MAXCODE_HOME:-/tmp/maxcode-gpu-home}
report="$OUT/report.txt"
: > "$report"
step() { echo "== $1 $(date +%T)" | tee -a "$report"; }
step "machine"
{ nvidia-smi -L; nproc; free -g | head -2
  python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; } \
  2>&1 | tee -a "$report"

step "the reward's clock (GPU tests)"
MAXCODE_TEST_GPU=1 timeout 180 python3 -m pytest -q -p no:cacheprovider -n 0 -m gpu -s \
  tests/evaluate/test_kernelbench_gpu_clock.py 2>&1 | tee "$OUT/clock.txt" | tail -12
grep -E "^(gpu_|identical)|passed|failed" "$OUT/clock.txt" >> "$report"

# Large outputs: the elementwise level-1 problems (outputs of gigabytes at full size) and two
# level-2 ones, each against itself, one round; their speedups and intervals.
step "large outputs at full size"
timeout 200 python3 benchmarks/kernelbench_public.py "$KB" --levels 1,2 --scale 1 \
  --device cuda --rounds 1 \
  --only level1/19,level1/20,level1/21,level1/22,level1/23,level1/24,level1/25,level1/26,level1/27,level1/28,level1/29,level1/30 \
  --jsonl "$OUT/large.jsonl" 2>&1 | tee "$OUT/large.txt" | tail -20
tail -8 "$OUT/large.txt" >> "$report"

# Published kernels: a sample of 24 with their scores; four evaluations side by side, so that
# builds (every core) overlap another's timing (one GPU turn at a time).
step "corpus sample"
timeout 300 python3 benchmarks/corpus.py "$CORPUS" --device cuda --sample 24 --seed 1 \
  --rounds 1 --timeout 240 --workers 4 --jsonl "$OUT/corpus.jsonl" 2>&1 \
  | tee "$OUT/corpus.txt" | tail -40
tail -25 "$OUT/corpus.txt" >> "$report"

step "seconds per evaluation (phases)"
python3 - "$OUT/large.jsonl" "$OUT/corpus.jsonl" <<'EOF' 2>&1 | tee -a "$report"
import json, statistics, sys
for path in sys.argv[1:]:
    try:
        rows = [json.loads(line) for line in open(path)]
    except OSError:
        continue
    phases = {}
    for row in rows:
        found = row.get("phases") or (row.get("feedback") or {}).get("phases") or {}
        for name, seconds in found.items():
            phases.setdefault(name, []).append(seconds)
    said = ", ".join(f"{name} {statistics.median(v):.1f}" for name, v in phases.items())
    print(f"{path}: {len(rows)} rows; median seconds: {said}")
EOF
step "done"
