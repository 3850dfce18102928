#!/usr/bin/env bash
# The paper's run for a GPU's first minutes (README, "On a GPU"): bench.py's CUDA tables, then
# the paper's network and recipe (quadratic encoding, 6 layers of width 400, A.4) for 30 of its
# 300 epochs (15,000 steps), the layers' measures and heads every 500 steps in steps.jsonl.
#
#     bash gpu.sh [DATA_DIR] [OUT]    # DATA_DIR holds cifar-10-batches-py (default data);
#                                     # OUT gets bench.json and the run (default results/gpu)
#
# Extra arguments after OUT go to train.py (the tests add flags that shrink the run).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
data=$(realpath -m "${1:-$root/data}")  # the caller's paths, before moving to the project's root
out=$(realpath -m "${2:-$root/results/gpu}")
shift $(( $# < 2 ? $# : 2 ))
cd "$root"
mkdir -p "$out/quadratic-e30"
if [ -z "${GPU_SH_NO_BENCH:-}" ]; then
    python3 bench.py --devices cuda --repeats 5 --json "$out/bench.json" | tee "$out/bench.txt"
fi
python3 train.py --encoding quadratic --epochs 30 --log-every 500 --data-dir "$data" --out "$out/quadratic-e30" "$@" \
    2>&1 | tee -a "$out/quadratic-e30/train.log"
