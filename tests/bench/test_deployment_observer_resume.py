"""bench/deployment_observer.py saves its ladder after every round and resumes it: ladder.csv reads
back as `threat_ladder.ladder` made it, and a folder made with other settings is refused untouched."""

import os

import pytest
from absl import app

from bench import deployment_observer as bench
from tff_radiomap.experiments import threat_ladder
from tff_radiomap.privacy.set_scoring import SetScore


def _rows():
    scores = {"observer": SetScore(20.0, 100.0, 0.25, 12), "constant": SetScore(100.0, 100.0, 0.0, 12)}
    return (
        threat_ladder._rows(1, "upload_twin", scores, 12.5)
        + threat_ladder._rows(1, "single_twin", scores, 3.0, run_ratio=0.05)
        + threat_ladder._rows(10, "upload_twin", None, 0.0, note="unobservable")
    )


def test_ladder_csv_reads_back_as_the_ladder_made_it(tmp_path):
    rows = _rows()
    threat_ladder.report(rows, str(tmp_path), "run")
    back = threat_ladder.read_rows(str(tmp_path / "ladder.csv"))
    assert threat_ladder.markdown(back, "run") == threat_ladder.markdown(rows, "run")
    assert back[0]["round"] == 1 and back[0]["transmitters"] == 12 and back[0]["ratio"] == pytest.approx(0.2)
    assert back[-1] == {
        "round": 10,
        "column": "upload_twin",
        "attacker": "observer",
        "seconds": 0.0,
        "run_ratio": pytest.approx(float("nan"), nan_ok=True),
        "note": "unobservable",
    }


def test_a_stopped_ladder_resumes_with_its_settings_and_is_refused_with_others(tmp_path):
    out = str(tmp_path / "ladder")
    record = {"run": "/runs/none_s0", "settings": {"stride": 4, "sweeps": 3}, "columns": ["upload_twin"], "shadowed_root": None}
    assert bench._resumed(out, record) == []  # A new folder: the record is written.
    assert bench._resumed(out, record) == []  # No round finished yet.
    threat_ladder.report(_rows(), out, "none_s0")
    assert {r["round"] for r in bench._resumed(out, record)} == {1, 10}
    saved = {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}
    other = dict(record, settings={"stride": 2, "sweeps": 3})
    with pytest.raises(app.UsageError, match=r"holds a ladder made otherwise \(settings: saved .*'stride': 4.*asked .*'stride': 2"):
        bench._resumed(out, other)
    assert {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)} == saved
