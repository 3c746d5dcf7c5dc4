#!/usr/bin/env bash
# On a machine with a GPU: seconds per RadioUNet round at 256x256, width x1.0, with the clients'
# training on the GPU (learning/in_process_clients.py), and whether the GPU was used. < 5 minutes.
#
#   bench/gpu_check.sh               # GPU machine (TensorFlow must see the GPU, see README "GPU")
#   bench/gpu_check.sh --cpu_smoke   # any machine: tiny model, checks that the script runs
#
# Extra flags go to `python -m bench.gpu_check` (--clients, --samples, --rounds, --nocompare_tff).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec timeout --signal=TERM 295 "$PY" -m bench.gpu_check "$@"
