#!/usr/bin/env bash
# A GPU's first minutes: does the paper's width make layer 4 sharpen around the query?
#
#     bash lab/gpu.sh [DATA_DIR] [OUT]    # DATA_DIR holds cifar-10-batches-py (default data/);
#                                         # OUT gets the runs, their logs and bench (default runs/gpu)
#
# Two runs side by side on the one GPU, train.py's paper recipe (quadratic encoding, 6 layers,
# A.4, bf16 by auto) as a complete 30-epoch schedule (15,000 steps: warm-up 750, cosine to zero
# at 15,000; not the first tenth of the paper's 300 epochs), the layers' measures and heads
# every 500 steps in steps.jsonl: OUT/width400 (the paper's width) and OUT/width64 (--dim 64,
# the CPU runs' width; the one difference). Each gets GPU_TRAIN_SECONDS (default 480): at the
# limit it is stopped with SIGINT and saves at a batch boundary, its finished epochs kept
# (continue with python train.py --resume OUT/width400). Then bench's CUDA tables for at most
# GPU_BENCH_SECONDS (default 90), each written to OUT/bench.json as it finishes; a bench that
# fails costs the runs nothing. Last, the tests that need a GPU (pytest -m gpu) for at most
# GPU_TEST_SECONDS (default 60; 0: none) into OUT/pytest-gpu.log. Arguments after OUT go to
# both runs (the tests shrink them).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=$(realpath -m "${1:-$root/data}")  # the caller's paths, before moving to the project's root
out=$(realpath -m "${2:-$root/runs/gpu}")
shift $(( $# < 2 ? $# : 2 ))
cd "$root"
mkdir -p "$out"

train() {  # $1: the run's name; then its flags
    local name=$1
    shift
    timeout --preserve-status -s INT -k 60 "${GPU_TRAIN_SECONDS:-480}" python3 train.py --encoding quadratic --epochs 30 \
        --log-every 500 --data-dir "$data" --out "$out/$name" "$@" > "$out/$name.log" 2>&1
    echo "$name: exit $? (0: finished; 130: stopped at its time limit, saved)" | tee -a "$out/$name.log"
}

train width400 "$@" &
train width64 --dim 64 "$@" &
wait
timeout -k 10 "${GPU_BENCH_SECONDS:-90}" python3 -m lab.bench --devices cuda --repeats 5 --json "$out/bench.json" \
    > "$out/bench.txt" 2>&1 || echo "bench: exit $? (the runs are kept)" | tee -a "$out/bench.txt"
if (( ${GPU_TEST_SECONDS:-60} > 0 )); then
    timeout -k 10 "${GPU_TEST_SECONDS:-60}" python3 -m pytest -q -rs -m gpu -p no:cacheprovider test_all.py lab/test_lab.py \
        > "$out/pytest-gpu.log" 2>&1
    echo "tests that need a GPU: exit $? (0: passed; without a GPU, skipped)" | tee -a "$out/pytest-gpu.log"
fi
exit 0
