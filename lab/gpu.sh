#!/usr/bin/env bash
# A GPU lease in one command: train.py's step timed eager, compiled and as CUDA graphs, then A.4 at
# the paper's width with the fastest that agrees, for the longest complete schedule the lease holds.
#
#     bash lab/gpu.sh DATA_DIR OUT SECONDS [flags]    # DATA_DIR holds cifar-10-batches-py; SECONDS:
#                                                     # the lease's training time, all its calls together
#
# A first call (OUT holds no checkpoint, nor modes.json) runs `python -m lab.lease`: train.py's
# training step at A.4's recipe (width 400, batch 100, seed 0, the precision auto picks) for GPU_STEPS
# steps (40) in each of GPU_MODES (eager,default,reduce-overhead), each checked against eager's losses
# (OUT/modes.json, OUT/modes.txt). Then train.py trains OUT/width400 in the fastest mode that agrees,
# for as many epochs as SECONDS hold at that mode's step (plus 5% for evaluation, logs and
# checkpoints; an --epochs among the flags overrides it). It evaluates and saves every 5 epochs and
# logs the layers' measures and heads every 500 steps. GPU_CALL_SECONDS (540) after the call began,
# the run is stopped with SIGINT and saves at a batch boundary. A later call (OUT holds the
# checkpoint) continues it with --resume, for as long again. Each call appends what it did, with
# times, to OUT/gpu.log, and the run's output to OUT/width400.log. The flags go to the bench and to
# train.py; the tests shrink the run with them. PYTHON names the interpreter (python3 when unset): a
# caller whose interpreter is not first on PATH (a venv not activated) passes its own.
set -uo pipefail
python=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
data=$(realpath -m "$1")  # the caller's paths, before moving to the project's root
out=$(realpath -m "$2")
budget=$3
shift 3
cd "$root"
mkdir -p "$out"
run=$out/width400
say() { echo "$(date -u +%FT%TZ) +${SECONDS}s: $*" | tee -a "$out/gpu.log"; }

if [ -e "$run/checkpoint.pt" ]; then
    say "continuing $run"
    args=(--resume "$run")
else
    flags=(--encoding quadratic --seed 0 --data-dir "$data" --eval-every 5 --log-every 500 "$@")
    if [ ! -e "$out/modes.json" ] && ! "$python" -m lab.lease --modes "${GPU_MODES:-eager,default,reduce-overhead}" --steps "${GPU_STEPS:-40}" \
            --train-flags "${flags[*]@Q}" --json "$out/modes.json" > "$out/modes.txt" 2>&1; then
        say "bench failed (OUT/modes.txt); nothing trained"
        exit 1
    fi
    read -r mode epoch_s < <("$python" -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(r["fastest"], r["fastest_epoch_s"])' "$out/modes.json")
    epochs=$(awk -v b="$budget" -v e="$epoch_s" 'BEGIN { print int(b / (1.05 * e)) }')
    say "fastest mode that agrees: $mode, $epoch_s s an epoch of training steps; $budget s hold $epochs epochs"
    (( epochs >= 100 )) || say "$epochs epochs: under 100, all that $budget s hold at this step"
    compile=()
    [ "$mode" != eager ] && compile=(--compile "$mode")
    args=(--epochs "$epochs" "${flags[@]}" "${compile[@]}" --out "$run")  # an --epochs in the flags comes later
fi
left=$(( ${GPU_CALL_SECONDS:-540} - SECONDS ))
if (( left <= 0 )); then
    say "no time left in this call to train; the same command trains"
    exit 0
fi
say "training for at most $left s: $python train.py ${args[*]}"
timeout --preserve-status -s INT -k 60 "$left" "$python" train.py "${args[@]}" >> "$out/width400.log" 2>&1
say "train.py: exit $? (0: finished; 130: stopped at the call's limit and saved, continued by the same command)"
