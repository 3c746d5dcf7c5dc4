"""The clients' data and every random choice of a round, as pure functions of (seed, round).

A map-level train/validation/test split comes first, then the training maps are dealt to the
clients (`radiomapseer.split_maps`, `partition_maps`). Per round r:
    - `sample_clients(seed, r, K, m)`: the m of K clients taking part, drawn without replacement;
    - `client_dataset(k, r)`: client k's samples, reshuffled for each local epoch, in batches.
Both depend on (seed, r, k) only, so a run resumed at round r draws what an uninterrupted run
draws, and the centralised reference sees the same number of samples per round.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from tff_radiomap.data import radiomapseer
from tff_radiomap import seeds as seeds_lib

# Stream ids keep the random streams of different purposes independent for the same seed.
_SAMPLING, _SHUFFLE, _CENTRAL = seeds_lib.CLIENT_SAMPLING, seeds_lib.SHUFFLE, seeds_lib.CENTRAL_SHUFFLE


def sample_clients(seed: int, round_num: int, num_clients: int, clients_per_round: int) -> np.ndarray:
    """Sorted ids of the clients taking part in `round_num`."""
    if not 1 <= clients_per_round <= num_clients:
        raise ValueError(f"clients_per_round={clients_per_round}: expected 1..{num_clients}")
    rng = seeds_lib.generator(seed, _SAMPLING, round_num)
    return np.sort(rng.choice(num_clients, clients_per_round, replace=False))


def epoch_order(n: int, seed: int, round_num: int, stream: int, index: int, epochs: int) -> np.ndarray:
    """`epochs` concatenated permutations of range(n), a pure function of its arguments."""
    rng = seeds_lib.generator(seed, stream, round_num, index)
    return np.concatenate([rng.permutation(n) for _ in range(epochs)]) if n else np.zeros(0, np.int64)


def batched(x: np.ndarray, y: np.ndarray, batch_size: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(batch_size)


# -- Client data by reference ----------------------------------------------------------------------
# A round can send each client a reference instead of its samples: the paths of two raw float32
# files holding its x [n,r,r,2] and y [n,r,r,1] (written once, `FederatedRadioMaps.client_files`)
# and the round's sample order, and the client's key (its index, for keyed defenses:
# `aggregators.keyed`). The TFF computation reads the files (`read_samples`), so a round
# serializes a few hundred bytes a client instead of its tensors. The worker must see the files:
# a local worker, or workers sharing the folder.
def reference_spec() -> collections.OrderedDict:
    """Element spec of a reference data set (one element)."""
    return collections.OrderedDict(
        x_path=tf.TensorSpec([], tf.string), y_path=tf.TensorSpec([], tf.string), order=tf.TensorSpec([None], tf.int64), client=tf.TensorSpec([], tf.int32)
    )


def read_samples(reference, resolution: int) -> collections.OrderedDict:
    """TF: the samples a reference names, in its order: OrderedDict(x [N,r,r,2], y [N,r,r,1])."""

    def read(path, channels):
        flat = tf.io.decode_raw(tf.io.read_file(path), tf.float32)
        return tf.gather(tf.reshape(flat, [-1, resolution, resolution, channels]), reference["order"])

    return collections.OrderedDict(x=read(reference["x_path"], 2), y=read(reference["y_path"], 1))


@dataclasses.dataclass
class FederatedRadioMaps:
    """Training samples per client, and the validation and test sets, in memory.

    clients[k] = (x [n_k,r,r,2], y [n_k,r,r,1]); val / test = (x, y).
    """

    clients: list
    val: tuple
    test: tuple
    seed: int

    @classmethod
    def load(
        cls,
        data: radiomapseer.RadioMapSeer,
        num_clients: int,
        seed: int,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
    ) -> "FederatedRadioMaps":
        split = radiomapseer.split_maps(len(data.map_ids), val_fraction, test_fraction, seed)
        parts = radiomapseer.partition_maps(split.train, num_clients, seed)
        clients = []
        for part in parts:
            a = data.arrays(part)
            clients.append((a["x"], a["y"]))
        val = data.arrays(split.val)
        test = data.arrays(split.test)
        return cls(clients, (val["x"], val["y"]), (test["x"], test["y"]), seed)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def client_sizes(self) -> np.ndarray:
        return np.asarray([len(x) for x, _ in self.clients], np.int64)

    def client_dataset(self, k: int, round_num: int, batch_size: int, epochs: int = 1) -> tf.data.Dataset:
        """Client k's `epochs` local epochs of round `round_num`, in batches."""
        x, y = self.clients[k]
        order = epoch_order(len(x), self.seed, round_num, _SHUFFLE, k, epochs)
        return batched(x[order], y[order], batch_size)

    def round_datasets(self, clients, round_num: int, batch_size: int, epochs: int = 1) -> list:
        return [self.client_dataset(int(k), round_num, batch_size, epochs) for k in clients]

    def client_samples(self, k: int, round_num: int, epochs: int = 1) -> collections.OrderedDict:
        """Client k's samples of round `round_num` in training order, as numpy arrays
        OrderedDict(x, y, client=k): what `client_dataset` yields, unbatched, and the client's key."""
        x, y = self.clients[k]
        order = epoch_order(len(x), self.seed, round_num, _SHUFFLE, k, epochs)
        return collections.OrderedDict(x=x[order], y=y[order], client=np.int32(k))

    def client_files(self) -> list[tuple[str, str]]:
        """(x path, y path) of each client's raw float32 files, written on first call to a
        temporary folder that is deleted at exit (or by `remove_client_files`)."""
        if getattr(self, "_files", None) is None:
            folder = tempfile.mkdtemp(prefix="tff_radiomap_clients_")
            atexit.register(shutil.rmtree, folder, True)
            files = []
            for k, (x, y) in enumerate(self.clients):
                paths = (os.path.join(folder, f"client{k}_x.f32"), os.path.join(folder, f"client{k}_y.f32"))
                np.ascontiguousarray(x, np.float32).tofile(paths[0])
                np.ascontiguousarray(y, np.float32).tofile(paths[1])
                files.append(paths)
            self._files = files
        return self._files

    def remove_client_files(self) -> None:
        if getattr(self, "_files", None) is not None:
            shutil.rmtree(os.path.dirname(self._files[0][0]), ignore_errors=True)
            self._files = None

    def client_reference(self, k: int, round_num: int, epochs: int = 1) -> tf.data.Dataset:
        """Client k's round as a reference (see `reference_spec`): the samples of `client_dataset`."""
        x_path, y_path = self.client_files()[k]
        order = epoch_order(len(self.clients[k][0]), self.seed, round_num, _SHUFFLE, k, epochs)
        element = collections.OrderedDict(x_path=x_path, y_path=y_path, order=order.astype(np.int64), client=np.int32(k))
        return tf.data.Dataset.from_tensors(element)

    def round_references(self, clients, round_num: int, epochs: int = 1) -> list:
        return [self.client_reference(int(k), round_num, epochs) for k in clients]

    def pooled_train(self) -> tuple[np.ndarray, np.ndarray]:
        """All clients' samples together (for the centralised reference)."""
        return np.concatenate([x for x, _ in self.clients]), np.concatenate([y for _, y in self.clients])
