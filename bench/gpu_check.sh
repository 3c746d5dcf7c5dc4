#!/usr/bin/env bash
# On a machine with a GPU: seconds per RadioUNet round at 256x256, width x1.0, with the clients'
# training on the GPU (learning/in_process_clients.py), and whether the GPU was used; then the
# programs' GPU path: 2 rounds of programs.privacy_radiomap and programs.epfl_remnet with
# --client_placement=in_process against --client_placement=tff on a small synthetic set, and the
# largest relative difference of their per-round metrics (float tolerance expected). Stops itself
# after 295 s.
#
#   bench/gpu_check.sh               # GPU machine (TensorFlow must see the GPU, see docs/runtime.md, "GPUs")
#   bench/gpu_check.sh --cpu_smoke   # any machine: tiny model, checks that the script runs
#
# Extra flags go to `python -m bench.gpu_check` (--clients, --samples, --rounds, --nocompare_tff).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
# TensorFlow's C++ start-up noise: programs/console.py (unless TF_CPP_MIN_LOG_LEVEL is set).
deadline=$((SECONDS + 295))
timeout --signal=TERM 200 "$PY" -m bench.gpu_check "$@"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m programs.make_dataset --output_dir="$work/data" --maps=8 --transmitters=4 --size=64 --seed=3 \
  >"$work/make_dataset.log" 2>&1 || { cat "$work/make_dataset.log" >&2; exit 1; }
run() {  # run PLACEMENT PROGRAM FLAGS...: the program with --client_placement=PLACEMENT, in the time left.
  local placement="$1" program="$2"; shift 2
  local left=$((deadline - SECONDS))
  [ "$left" -gt 10 ] || { echo "error: no time left for $program --client_placement=$placement" >&2; exit 1; }
  timeout --signal=TERM "$left" "$PY" -m "programs.$program" --client_placement="$placement" "$@" | sed "s/^/  [$program $placement] /"
}
for placement in tff in_process; do
  run "$placement" privacy_radiomap --data_root="$work/data" --resolution=64 --clients=4 --clients_per_round=2 \
    --batch_size=8 --rounds=2 --stage1_rounds=1 --noprogress --output_dir="$work/privacy_$placement"
  run "$placement" epfl_remnet --data_root="$work/data" --rounds=2 --clients_per_round=8 --local_epochs=1 \
    --sync_period=1 --eval_every=1 --output_dir="$work/remnet_$placement"
done
"$PY" - "$work" <<'PY'
import csv, sys
def rows(path):
    return list(csv.DictReader(open(path)))
worst = 0.0
for name, pattern, keys in (("privacy_radiomap", "privacy_{}/metrics.csv", ("train_loss", "val_mse")),
                            ("epfl_remnet", "remnet_{}/heavy/epfl_remnet/metrics.csv", ("train_loss", "macro_rmse"))):
    a, b = (rows(f"{sys.argv[1]}/{pattern.format(p)}") for p in ("in_process", "tff"))
    diff = max(abs(float(x[k]) - float(y[k])) / max(abs(float(y[k])), 1e-12) for x, y in zip(a, b) for k in keys)
    print(f"{name} --client_placement=in_process vs tff, 2 rounds: largest relative difference {diff:.2e}")
    worst = max(worst, diff)
print(f"{'within' if worst < 1e-3 else 'OUTSIDE'} float tolerance 1e-3")
sys.exit(0 if worst < 1e-3 else 1)
PY
