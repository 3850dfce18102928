#!/usr/bin/env bash
# The commands README.md and exercises/ give, each timed alone: wall time and peak memory.
#
#   bash lab/time_commands.sh [OUT]      # default runs/commands; about 6 minutes on 2 cores
#
# Each command's log, OUT/NAME.log: the command, what computed it (commit, torch, CPU and its
# matrix-unit class, threads), its output, and /usr/bin/time -v's report (wall clock, maximum
# resident set size). Run from the project's root with nothing else on the machine. Training
# runs are timed in their own folders (train.log); the quick suite (-m "not slow") here, the whole one in CI. Committed logs, per CPU
# class: lab/results/commands/ (AMD EPYC with AVX512-BF16), lab/results/commands/avx2/ (AVX2 only).
set -u
cd "$(dirname "$0")/.."
out=${1:-runs/commands}
mkdir -p "$out"
env_line=$(python -c "import torch, records; print(records.environment(torch.device('cpu')))")

timed() {  # NAME COMMAND...
  local name=$1; shift
  { echo "\$ $*"; echo "# $env_line"; /usr/bin/time -v "$@" 2>&1; } > "$out/$name.log"
  echo "$name: $(grep -E 'Elapsed' "$out/$name.log" | sed 's/.*: //') wall," \
       "$(grep -E 'Maximum resident' "$out/$name.log" | sed 's/.*: //') kB peak"
}

timed prove python prove.py --out "$out/prove"
timed model python model.py
timed attention python attention.py
timed visualize-laptop python visualize.py lab/results/student/epyc-bf16 --layer 1 --out "$out/figures-laptop"
timed visualize-day3 python visualize.py lab/results/course/train-fp32-s0 --layer 1 --out "$out/figures-day3"
timed prune-day4 python prune.py lab/results/fig2/deep6-e6-s0 --no-finetune --out "$out/day4-pruned"
timed visualize-day4 python visualize.py lab/results/fig2/deep6-e6-s0 --layer 4 --out "$out/figures-day4"
timed compare-day5 python -m lab.compare lab/results/reviewer/learned-s0 lab/results/reviewer/learned-s1 \
  lab/results/reviewer/learned-s2 lab/results/reviewer/sinusoidal-s0 lab/results/reviewer/sinusoidal-s1 \
  lab/results/reviewer/sinusoidal-s2 lab/results/grid/laptop-s0 lab/results/grid/laptop-s1 lab/results/grid/laptop-s2 \
  lab/results/grid/start-a4-s0 lab/results/grid/start-a4-s1 lab/results/grid/start-a4-s2 --out "$out/day5"
timed compare-day5-longer python -m lab.compare lab/results/longer/learned-e10-s0 lab/results/longer/learned-e10-s1 \
  lab/results/longer/learned-e10-s2 --measures locality_3x3
timed compare-day5-mlp python -m lab.compare "lab/results/reviewer/learned-s*" "lab/results/reviewer/mlp-s*"
timed compare-day5-overlap python -m lab.compare lab/results/fig2/paper-e3-s0 lab/results/fig2/paper-e3-s1 \
  lab/results/fig2/paper-e3-s2 lab/results/fig2/overlap-e3-s0 lab/results/fig2/overlap-e3-s1 \
  lab/results/fig2/overlap-e3-s2 --at 0 1500 --origins 1
for day in 1 2 3 4 5; do
  run=(); [ "$day" = 3 ] && run=(--run lab/results/course/train-fp32-s0)
  timed "check-day$day" python -m exercises.check "$day" "${run[@]}"
done
timed pytest-quick python -m pytest -q -p no:cacheprovider -m "not slow"
