"""The rows of a run folder's metrics.csv, for the privacy experiment's tests."""

import csv
import os


def rows_of(output_dir):
    with open(os.path.join(output_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))
