"""The derived seeds (`tff_radiomap/seeds.py`): their values are part of every saved run (a resumed
or re-read run must draw what it drew), so they are pinned here."""

import numpy as np

from tff_radiomap import seeds


def test_derived_seeds_keep_their_values():
    np.testing.assert_array_equal(seeds.fold_in(np.array([7, 3], np.int64), 2).numpy(), [7, 3 * 1000003 + 2])
    np.testing.assert_array_equal(seeds.fold_in((7, 3), 5, stride=seeds.SAMPLE_STRIDE).numpy(), [7, 3 * 2**20 + 5])
    assert seeds.client_seed(4, 17) == 4017
    assert seeds.generator(5, seeds.CLIENT_SAMPLING, 9).integers(1 << 30) == np.random.default_rng([5, 1, 9]).integers(1 << 30)
    ids = (seeds.CLIENT_SAMPLING, seeds.SHUFFLE, seeds.CENTRAL_SHUFFLE, seeds.ALLOCATOR_BUFFER, seeds.NOISE_GRAMS, seeds.HARM_PROBES)
    assert ids == (1, 2, 3, 14, 20, 21) and len(set(ids)) == len(ids)


def test_seeded_normal_rows_are_each_rows_own_stateless_draw():
    import tensorflow as tf

    pairs = np.array([[4, 0], [4, 1], [9, 2**20 + 3]], np.int64)
    rows = seeds.seeded_normal_rows(pairs, 1, [5, 2]).numpy()
    assert rows.shape == (3, 5, 2)
    for n, pair in enumerate(pairs):
        np.testing.assert_array_equal(rows[n], tf.random.stateless_normal([5, 2], seed=seeds.fold_in(tf.constant(pair), 1)).numpy())
    assert not np.array_equal(rows[0], rows[1])
    np.testing.assert_array_equal(seeds.seeded_normal_rows(pairs[:1], 1, [5, 2]).numpy()[0], rows[0])  # The batch does not matter.
