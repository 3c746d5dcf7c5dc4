"""tff_radiomap: TensorFlow Federated simulations of federated radio-map learning.

The dependencies below are what the package really needs. They cannot be resolved by a plain
`pip install .`: tensorflow-federated 0.87.0 pins jaxlib==0.4.14, which the package index no
longer serves. `make venv` installs the locked set in requirements.lock, then TFF with --no-deps,
then this package with --no-deps (see README, "Install").
"""

import setuptools

INSTALL_REQUIRES = [
    "tensorflow==2.14.1",
    "tensorflow-federated==0.87.0",
    "tensorflow-privacy==0.9.0",
    "dp-accounting==0.4.3",
    "jax==0.4.14",
    "jaxlib==0.4.13",  # jax 0.4.14 accepts it; 0.4.14 is no longer served.
    "numpy>=1.25,<1.26",
    "scipy==1.9.3",
    "absl-py==1.4.0",
    "pillow>=10",  # PNG reading and writing of the RadioMapSeer layout.
    "tqdm>=4",  # progress bars in programs.
    "matplotlib>=3.8,<3.9",  # figures (Fig. 2, Pareto fronts).
    "portpicker>=1.6",
]
# What only the tests and the benchmarks use (all in requirements.lock, which `make venv` installs).
EXTRAS_REQUIRE = {
    "test": [
        "pytest>=8",
        "pytest-xdist>=3",  # The Makefile's `make test` runs the suite with -n.
        "scikit-learn>=1.3",  # The ridge attacker's reference (tests/privacy/test_attack.py).
        "psutil>=5",  # Process checks of the worker tests.
    ],
    "bench": ["psutil>=5"],  # bench/memory_flat.py.
}

setuptools.setup(
    name="tff_radiomap",
    version="0.1.0",
    description="Federated radio-map learning for wireless digital twins, on TensorFlow Federated.",
    python_requires=">=3.11,<3.12",
    packages=setuptools.find_packages(include=["tff_radiomap*", "programs*", "baselines*", "bench*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
