import csv
import json
import os

from tff_radiomap.runtime import run_folder


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _rounds(path):
    with open(path) as f:
        return [r["round"] for r in csv.DictReader(f)]


def test_truncate_keeps_the_saved_rounds_in_order_and_drops_the_rest(tmp_path):
    path = str(tmp_path / "m.csv")
    _write(path, "round,a,b\n1,0.1,2\n2,0.2,3\n3,0.3,4\n")
    assert [r["round"] for r in run_folder.truncate_csv(path, 2)] == ["1", "2"]
    assert _rounds(path) == ["1", "2"] and open(path).read().startswith("round,a,b\n")
    # A row cut short by a kill, a row whose round was cut ("1" of "12"), rows out of sequence.
    _write(path, "round,a,b\n1,0.1,2\n2,0.2\n")
    assert _rounds(path) == ["1", "2"] and len(run_folder.truncate_csv(path, 5)) == 1
    _write(path, "round,a,b\n10,1,1\n11,1,1\n1\n")
    assert [r["round"] for r in run_folder.truncate_csv(path, 12)] == ["10", "11"]
    _write(path, "round,a\n0,1\n1,1\n")
    assert run_folder.truncate_csv(path, -1) == [] and open(path).read() == "round,a\n"


def test_truncate_writes_a_new_header_and_creates_a_missing_file(tmp_path):
    path = str(tmp_path / "m.csv")
    run_folder.truncate_csv(path, 3, fields=["round", "x"])
    assert open(path).read() == "round,x\n"
    _write(path, "round,x\n0,1\n")
    run_folder.truncate_csv(path, 3, fields=["round", "x", "y"])
    assert open(path).read().splitlines() == ["round,x,y", "0,1,"]
    run_folder.truncate_csv(str(tmp_path / "absent.csv"), 3)
    assert not os.path.exists(tmp_path / "absent.csv")


def test_write_json_is_atomic_and_clear_removes_only_the_named_entries(tmp_path):
    run_folder.write_json(str(tmp_path / "c.json"), {"b": 1, "a": (1, 2)})
    assert json.load(open(tmp_path / "c.json")) == {"a": [1, 2], "b": 1}
    assert os.listdir(tmp_path) == ["c.json"]
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "x").write_text("1")
    (tmp_path / "keep.txt").write_text("1")
    assert run_folder.clear(str(tmp_path), ["c.json", "state", "absent"]) == ["c.json", "state"]
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_check_config_names_every_differing_field_and_honours_defaults_and_ignored(tmp_path):
    import numpy as np
    import pytest

    folder = str(tmp_path)
    record = {"a": 1, "b": (2, 3), "c": "x"}
    assert run_folder.check_config(record, folder) is False  # No config.json yet.
    run_folder.write_json(os.path.join(folder, "config.json"), {"a": 1, "b": [2, 3]})
    # "c" was added after the run was saved: its default (the value such runs had) stands in.
    assert run_folder.check_config(record, folder, defaults={"c": "x"})
    with pytest.raises(run_folder.RunFolderConflict, match=r"another configuration \(c: saved None, now 'x'\)"):
        run_folder.check_config(record, folder)
    with pytest.raises(run_folder.RunFolderConflict, match=r"a: saved 1, now 2, b: saved \[2, 3\], now \[2, 4\]"):
        run_folder.check_config({"a": 2, "b": (2, 4), "c": "x"}, folder, defaults={"c": "x"})
    assert run_folder.check_config({"a": 5, "b": (2, 3), "c": "x"}, folder, defaults={"c": "x"}, ignored={"a"})
    _write(os.path.join(folder, "config.json"), "{not json")
    with pytest.raises(KeyError, match="unreadable"):
        run_folder.check_config(record, folder, error=KeyError)
    # Arrays saved with a round: the newest `keep` stay.
    for r in range(1, 6):
        run_folder.save_round_arrays(folder, "extra", r, {"v": np.full(2, r)}, keep=2)
    assert sorted(os.listdir(os.path.join(folder, "extra"))) == ["round_4.npz", "round_5.npz"]
    np.testing.assert_array_equal(run_folder.load_round_arrays(folder, "extra", 5)["v"], [5, 5])
    assert run_folder.load_round_arrays(folder, "extra", 3) is None
