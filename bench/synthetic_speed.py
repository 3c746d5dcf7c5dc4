"""Prints the seconds it takes to generate one 256x256 synthetic transmitter map.

  python -m bench.synthetic_speed [--maps 3 --transmitters 8 --size 256]

Per map, the corner visibility (buildings only) is computed once; per transmitter, the ray sweep
and the corner-graph routing. Reported: median seconds per transmitter (excluding the per-map
part), median seconds of the per-map part, and the amortised figure for RadioMapSeer's 80
transmitters a map. One process, one core (OMP/BLAS threads are not used by this code).
"""

import argparse
import time

import numpy as np

from tff_radiomap.data import propagation
from tff_radiomap.data import encoding, synthetic


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maps", type=int, default=3)
    parser.add_argument("--transmitters", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    per_map, per_tx = [], []
    for m in range(args.maps):
        rng = np.random.default_rng(synthetic.map_seed(123, m))
        buildings = synthetic.generate_city(rng, args.size)
        t0 = time.perf_counter()
        prop = propagation.MapPropagation(buildings)
        per_map.append(time.perf_counter() - t0)
        for tx in synthetic.place_transmitters(rng, buildings, args.transmitters):
            t0 = time.perf_counter()
            encoding.gain_db_to_gray(prop.gain_db(tx))
            per_tx.append(time.perf_counter() - t0)
    tx_s, map_s = float(np.median(per_tx)), float(np.median(per_map))
    print(f"synthetic {args.size}x{args.size}: {len(per_tx)} transmitter maps over {args.maps} city maps")
    print(f"  per transmitter map (median): {tx_s:.4f} s")
    print(f"  per city map, corner visibility (median): {map_s:.3f} s")
    print(f"  amortised over 80 transmitters a map: {tx_s + map_s / 80:.4f} s per transmitter map (target <= 0.1 s)")


if __name__ == "__main__":
    main()
