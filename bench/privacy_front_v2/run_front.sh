#!/bin/bash
# The second front (bench/privacy_front_v2/RULE.md), breadth first: seed 0 of every row, then seeds
# 1 and 2. Run from the repository root; every call resumes its runs (finished ones are kept), so
# the script resumes after a stop. Then copy each finished run's config.json, metrics.csv and
# summary.json into bench/privacy_front_v2/<run>/ and write the front there with --report_only
# (RESULTS, "The second front").
set -e
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/privacy_front_v2}
run() { $PY -m programs.privacy_front --output_dir=$OUT --clip_norm=1.7 --jobs=2 --noreport "$@"; }
for seeds in 0 1,2; do
  run --seeds=$seeds --methods=none,clip
  run --seeds=$seeds --methods=uniform,central_dp --noise_multipliers=0.01 --z_grid=1
  run --seeds=$seeds --methods=ddp,uniform --noise_multipliers=0.003 --z_grid=1
  run --seeds=$seeds --methods=central_dp,ddp --z_grid=0.1
  run --seeds=$seeds --methods=uniform --noise_multipliers=0.001,0.03
  run --seeds=$seeds --methods=central_dp,ddp --z_grid=0.01,0.03
  # Aligned Noise and Adaptive (the leakage partition, as on the first front) at the nu the rule
  # picked from Uniform's seed-0 costs: 0.01 (RESULTS, "The second front").
  run --seeds=$seeds --methods=aligned,adaptive --noise_multipliers=0.01 --set=adaptive_partition=leakage,allocator_lambda_p=100,allocator_every=5
done
