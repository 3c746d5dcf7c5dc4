"""`atomic_write`: writers racing on one target never collide, and a reader never sees a part."""

import multiprocessing
import os
import threading

import numpy as np
import pytest

from tff_radiomap.data import twin
from tff_radiomap.runtime import atomic


def test_a_writer_finishing_inside_anothers_write_leaves_both_renames_whole(tmp_path):
    # The race a fixed temporary name loses: writer B writes and renames the target while writer A
    # is between its write and its rename (A's rename then found no temporary, or renamed B's half).
    path = str(tmp_path / "target.json")
    with atomic.atomic_write(path) as a:
        a.write("A" * 1000)
        with atomic.atomic_write(path) as b:
            b.write("B" * 10)
        assert open(path).read() == "B" * 10
    assert open(path).read() == "A" * 1000  # A's rename came last, whole.
    assert os.listdir(tmp_path) == ["target.json"]


def test_a_failed_write_removes_its_temporary_and_keeps_the_old_file(tmp_path):
    path = str(tmp_path / "t.bin")
    with atomic.atomic_write(path, "wb") as f:
        f.write(b"old")
    with pytest.raises(RuntimeError, match="midway"):
        with atomic.atomic_write(path, "wb") as f:
            f.write(b"new, half")
            raise RuntimeError("midway")
    assert open(path, "rb").read() == b"old"
    assert os.listdir(tmp_path) == ["t.bin"]


def _write_many(path: str, tag: int, count: int) -> None:
    for i in range(count):
        with atomic.atomic_write(path) as f:
            f.write(f"{tag} {i} " + "x" * 4096)


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_concurrent_writers_of_one_target_never_collide(tmp_path, kind):
    # Threads share a pid (a name of target and pid alone would collide); processes are what a
    # front's runs are. Every write must succeed, and every read sees one writer's whole file.
    path = str(tmp_path / "shared.txt")
    count = 200
    if kind == "threads":
        errors = []

        def run(tag):
            try:
                _write_many(path, tag, count)
            except Exception as exc:  # noqa: BLE001  (reported below)
                errors.append(exc)

        workers = [threading.Thread(target=run, args=(tag,)) for tag in range(4)]
    else:
        context = multiprocessing.get_context("spawn")
        workers = [context.Process(target=_write_many, args=(path, tag, count)) for tag in range(2)]
    for w in workers:
        w.start()
    seen = set()
    while any(w.is_alive() for w in workers):
        if os.path.exists(path):
            tag, i, body = open(path).read().split(" ")
            assert body == "x" * 4096  # Never a partial file.
            seen.add(tag)
    for w in workers:
        w.join()
    if kind == "threads":
        assert not errors, errors
    else:
        assert [w.exitcode for w in workers] == [0, 0]
    tag, i, body = open(path).read().split(" ")
    assert int(i) == count - 1 and body == "x" * 4096
    assert os.listdir(tmp_path) == ["shared.txt"]  # No temporary left behind.


def test_the_twin_position_cache_is_written_through_its_own_temporary(tmp_path, monkeypatch):
    # Two processes simulating the same map and positions wrote `<file>.tmp.npz`, one name for both:
    # here the second writer caches the same file while the first is between its write and rename.
    buildings = np.zeros((16, 16), np.uint8)
    root = tmp_path / "root"
    (root / "png" / "buildings_complete").mkdir(parents=True)
    from PIL import Image

    Image.fromarray(buildings).save(root / "png" / "buildings_complete" / "0.png")
    cache = str(tmp_path / "cache")
    positions = np.array([[3, 4], [10, 12]])
    real_savez = np.savez
    nested = []

    def savez(file, **arrays):
        real_savez(file, **arrays)
        if not nested:
            nested.append(file)
            twin.position_gains(str(root), 0, positions, cache_dir=cache)  # Writer B, whole.

    monkeypatch.setattr(np, "savez", savez)
    first = twin.position_gains(str(root), 0, positions, cache_dir=cache)
    monkeypatch.setattr(np, "savez", real_savez)
    assert len(os.listdir(cache)) == 1 and os.listdir(cache)[0].endswith(".npz")
    np.testing.assert_array_equal(twin.position_gains(str(root), 0, positions, cache_dir=cache), first)  # Read back, whole.
