"""Redraws OUTPUT_DIR/leakage.png of a programs.leakage_map audit from its groups.csv,
spectrum.csv and audit.json (no audit is rerun).

  python -m bench.leakage_audit.replot bench/leakage_audit/round1 bench/leakage_audit/round25
"""

import csv
import json
import os
import sys

from programs import leakage_map
from tff_radiomap.privacy import attack, leakage


def read(folder: str) -> leakage.AuditResult:
    with open(os.path.join(folder, "groups.csv")) as f:
        rows = [leakage.GroupRow(r["partition"], r["group"], int(r["size"]), *(float(r[k]) for k in leakage_map.GROUP_FIELDS[3:])) for r in csv.DictReader(f)]
    with open(os.path.join(folder, "audit.json")) as f:
        summary = json.load(f)
    with open(os.path.join(folder, "spectrum.csv")) as f:
        curve = [(int(r["k"]), attack.AttackResult(float(r["attack_rmse_m"]), summary["constant_rmse_m"], 0, 0, float("nan"))) for r in csv.DictReader(f)]
    return leakage.AuditResult(rows, curve, summary)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        leakage_map.plot(read(folder), os.path.join(folder, "leakage.png"))
        print(os.path.join(folder, "leakage.png"))
