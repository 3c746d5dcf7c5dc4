"""The configuration of one run of the privacy experiment (`privacy_radiomap.run`): one frozen
dataclass whose defaults are the CPU default set-up; the programs' flags map onto it, and every
run folder records it in config.json.
"""

from __future__ import annotations

import dataclasses
import math

from tff_radiomap.aggregators import secure_dp
from tff_radiomap.experiments.defense_registry import DEFENSES
from tff_radiomap.learning import radiounet_process
from tff_radiomap.models import radiounet
from tff_radiomap.models.phases import Phase
from tff_radiomap.runtime import nan_injection

ADAPTIVE_PARTITIONS = ("paper", "leakage")
SERVER_LR_SCHEDULES = ("constant", "cosine")
BASIS_SCOPES = ("federation", "client")


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One run of the privacy experiment. The defaults are the CPU default set-up, chosen on
    validation maps by the rule of bench/operating_point/RULE.md (bench/RESULTS.md, "The operating
    point"): the default data set (`data.default_set`, 96 maps x 32 transmitters), 5 local epochs
    at batch 16, 60 rounds of which 40 train stage 1. `PRESETS['cpu_v1']` is the set-up before it."""

    data_root: str
    resolution: int = 64
    width: float = 0.25
    # Stage 2's output activation (radiounet.RadioUNetConfig.stage2_output): "linear" (a ReLU output
    # let stage 2 die; bench/RESULTS.md, "Stage 2's output made linear: seed 1's dead stage 2"); runs saved
    # before the field existed used "relu" (LEGACY_VALUES).
    stage2_output: str = "linear"
    rounds: int = 60
    stage1_rounds: int = 40
    num_clients: int = 14
    clients_per_round: int = 6
    local_epochs: int = 5
    batch_size: int = 16
    client_optimizer: str = "adam"
    client_learning_rate: float = 1e-3
    server_optimizer: str = "sgd"
    server_learning_rate: float = 1.0
    # The server's learning rate over the rounds: "constant", or "cosine": from server_learning_rate
    # at a phase's first round down to server_lr_final times it at the phase's last (each phase
    # anew; `radiounet_process.cosine_schedule`).
    server_lr_schedule: str = "constant"
    server_lr_final: float = 0.1
    seed: int = 0
    defense: str = "none"
    centralised: bool = False  # Train the centralised reference instead of the federated system.
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    # Privacy defenses and the attack (paper 000, Section III); see privacy_defenses.py.
    clip_norm: float = 1.0  # C
    noise_multiplier: float = 3.0  # nu; budget B = d (C nu)^2. central_dp, ddp: z, the noise on the sum over C
    # ddp: TFF's DistributedDpSumFactory mechanism ("distributed_skellam" or "distributed_dgauss") and
    # the bits of the secure sum (its scale keeps a modular wrap-around at 1e-4 a coordinate).
    ddp_mechanism: str = "distributed_skellam"
    ddp_bits: int = 20
    sigma_min: float = 0.0  # Adaptive defense's noise floor (0: none)
    # The defenses' noise is seeded from `seed` (reproducible runs, exact resume): anyone who knows
    # the seed can recompute it for a guessed update. True: unseeded noise, the deployment setting
    # (the run is then not reproducible and a resume is not bit-exact).
    fresh_noise: bool = False
    attack_every: int = 0  # Attack at round 1, every n rounds and the last; 0: never
    attack_steps: int = 3  # S
    attack_train_traces: int = 1024
    attack_test_traces: int = 256
    attack_extra_root: str = ""  # The observer's own simulated samples (RadioMapSeer layout), training traces only.
    # The twin-matching attacker (experiments/privacy_matching.py), scored beside the ridge at every
    # attack round: the maps it observes (0: the ridge alone), its candidates' grid stride in cells
    # of the model's resolution (1: every outdoor cell), its calibration positions a map, and its
    # coarse-to-fine search (k: every k-th grid cell first, then the cells near the likely ones;
    # 1: every cell at once, the default: coarse to fine is cheaper and weaker, bench/RESULTS.md).
    matching_maps: int = 1
    matching_stride: int = 1
    matching_calibration: int = 8
    matching_coarse: int = 1
    # Subspace Noise (basis_refresh.BasisRefresher): share of B in the twin's leakage basis,
    # from `basis_positions` twin positions a map and its top `basis_k_per_map` directions. The
    # share 0.25 was chosen on seed 10 by the rule in bench/RESULTS.md ("Subspace Noise's
    # share, chosen on a selection seed"); runs before
    # it used 0.5, and every share tried (0.1-0.5) gave the same front to within a seed's spread.
    subspace_share: float = 0.25
    basis_positions: int = 32
    basis_k_per_map: int = 8
    basis_blocks: int = 1
    basis_every: int = 10  # Refresh at every phase's first round and every n rounds of it.
    # Whose basis a Subspace client uses: "federation" (every map's directions, one basis for all)
    # or "client" (its own maps' top directions, `basis_refresh.client_rank` of them; the
    # defense `subspace_client` is `subspace` with "client"). Aligned Noise is always "client".
    basis_scope: str = "federation"
    # Aligned Noise: mu, the weight of the utility cost against the discriminability, each relative
    # to Uniform Noise's (`privacy.aligned_allocation`); fixed before any front was run.
    aligned_tradeoff: float = 1.0
    twin_root: str = ""  # The defender's twin (RadioMapSeer layout); default: data.twin.ensure_twin(data_root).
    # Adaptive's groups: "paper" (the paper's mask groups) or "leakage" (the basis blocks of
    # Subspace Noise and the residual, refreshed as for `subspace`; see basis_refresh.uses_basis).
    adaptive_partition: str = "paper"
    allocator_lambda_p: float = 1.0
    allocator_lambda_h: float = 0.01
    # Train the allocator after a phase's first round and every n rounds of it (1: every round, as
    # in the paper; the allocation holds in between). The front's Adaptive rows use 5, for cost.
    allocator_every: int = 1
    map_size_m: float = 256.0
    # Test hook: "ROUND:CLIENT" feeds client CLIENT NaN inputs in round ROUND (if it is sampled),
    # so that its update is not finite; the run must zero it and count it (nonfinite_updates).
    inject_nan_client: str = ""
    # Where the clients train: "tff" (the TFF worker, CPU) or "in_process" (this Python process, on
    # a GPU if TensorFlow sees one); aggregation, defenses and the server step are TFF either way.
    # Equal to float tolerance, not bitwise: a run keeps the placement it started with.
    client_placement: str = "tff"

    def __post_init__(self):
        checks = [
            (self.rounds >= 1, "rounds", "an integer >= 1"),
            (0 <= self.stage1_rounds <= self.rounds, "stage1_rounds", f"an integer in 0..{self.rounds}"),
            (self.num_clients >= 1, "num_clients", "an integer >= 1"),
            (1 <= self.clients_per_round <= self.num_clients, "clients_per_round", f"an integer in 1..{self.num_clients}"),
            (self.local_epochs >= 1, "local_epochs", "an integer >= 1"),
            (self.batch_size >= 1, "batch_size", "an integer >= 1"),
            (self.client_optimizer in ("adam", "sgd"), "client_optimizer", "'adam' or 'sgd'"),
            (self.server_optimizer in ("adam", "sgd"), "server_optimizer", "'adam' or 'sgd'"),
            (self.server_lr_schedule in SERVER_LR_SCHEDULES, "server_lr_schedule", f"one of {SERVER_LR_SCHEDULES}"),
            (math.isfinite(self.server_lr_final) and 0 <= self.server_lr_final <= 1, "server_lr_final", "a number in [0, 1]"),
            (math.isfinite(self.client_learning_rate) and self.client_learning_rate > 0, "client_learning_rate", "a positive number"),
            (math.isfinite(self.server_learning_rate) and self.server_learning_rate > 0, "server_learning_rate", "a positive number"),
            (self.seed >= 0, "seed", "an integer >= 0"),
            (math.isfinite(self.width) and self.width > 0, "width", "a positive multiplier"),
            (self.defense in DEFENSES, "defense", f"one of {sorted(DEFENSES)}"),
            (not self.centralised or self.defense == "none", "defense", "'none' with centralised"),
            (math.isfinite(self.clip_norm) and self.clip_norm > 0, "clip_norm", "a positive number"),
            (math.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0, "noise_multiplier", "a non-negative number"),
            (self.ddp_mechanism in secure_dp.MECHANISMS, "ddp_mechanism", f"one of {secure_dp.MECHANISMS}"),
            (1 <= self.ddp_bits <= 22, "ddp_bits", "an integer in 1..22"),
            (
                self.defense not in DEFENSES or DEFENSES[self.defense].aggregate_dp == "" or self.noise_multiplier > 0,
                "noise_multiplier",
                f"a positive z for defense={self.defense!r}",
            ),
            (math.isfinite(self.sigma_min) and self.sigma_min >= 0, "sigma_min", "a non-negative number"),
            (self.attack_every >= 0, "attack_every", "an integer >= 0"),
            (math.isfinite(self.subspace_share) and 0 <= self.subspace_share <= 1, "subspace_share", "a number in [0, 1]"),
            (self.basis_positions >= 2, "basis_positions", "an integer >= 2"),
            (1 <= self.basis_k_per_map < self.basis_positions, "basis_k_per_map", f"an integer in 1..basis_positions-1={self.basis_positions - 1}"),
            (self.basis_blocks >= 1, "basis_blocks", "an integer >= 1"),
            (self.basis_every >= 1, "basis_every", "an integer >= 1"),
            (self.basis_scope in BASIS_SCOPES, "basis_scope", f"one of {BASIS_SCOPES}"),
            (math.isfinite(self.aligned_tradeoff) and self.aligned_tradeoff >= 0, "aligned_tradeoff", "a non-negative number"),
            (self.allocator_every >= 1, "allocator_every", "an integer >= 1"),
            (self.adaptive_partition in ADAPTIVE_PARTITIONS, "adaptive_partition", f"one of {ADAPTIVE_PARTITIONS}"),
            (self.attack_steps >= 1, "attack_steps", "an integer >= 1"),
            (self.attack_train_traces >= 10, "attack_train_traces", "an integer >= 10"),
            (self.attack_test_traces >= 1, "attack_test_traces", "an integer >= 1"),
            (self.matching_maps >= 0, "matching_maps", "an integer >= 0"),
            (1 <= self.matching_stride <= self.resolution, "matching_stride", f"an integer in 1..resolution={self.resolution}"),
            (self.matching_calibration >= 2, "matching_calibration", "an integer >= 2"),
            (self.matching_coarse >= 1, "matching_coarse", "an integer >= 1"),
            (self.client_placement in radiounet_process.CLIENT_PLACEMENTS, "client_placement", f"one of {radiounet_process.CLIENT_PLACEMENTS}"),
            (not self.centralised or self.client_placement == "tff", "client_placement", "'tff' with centralised (no clients)"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected {expected}")
        self.model_config()  # Validates resolution and width.
        self.nan_injection()  # Validates inject_nan_client.

    def nan_injection(self) -> tuple[int, int] | None:
        """(round, client) of the `inject_nan_client` test hook, or None."""
        return nan_injection.parse(self.inject_nan_client, 1, self.rounds, self.num_clients)

    def model_config(self) -> radiounet.RadioUNetConfig:
        return radiounet.RadioUNetConfig(resolution=self.resolution, width=self.width, stage2_output=self.stage2_output)

    def phase_rounds(self, phase: Phase) -> tuple[int, int]:
        """(first, last) round of `phase` in this run."""
        if phase == Phase.STAGE1:
            return 1, self.stage1_rounds
        if phase == Phase.STAGE2:
            return self.stage1_rounds + 1, self.rounds
        return 1, self.rounds

    def server_learning_rate_schedule(self):
        """Round -> the server's learning rate, or None for a constant rate (`server_lr_schedule`)."""
        if self.server_lr_schedule == "constant":
            return None
        schedules = {}
        for phase in {self.phase_for_round(r) for r in (1, self.rounds)}:
            first, last = self.phase_rounds(phase)
            schedules[phase] = radiounet_process.cosine_schedule(self.server_learning_rate, self.server_lr_final, first, last)
        return lambda round_num: schedules[self.phase_for_round(round_num)](round_num)

    def phase_for_round(self, round_num: int) -> Phase:
        if DEFENSES[self.defense].protocol == "fedsgd":
            return Phase.JOINT
        return Phase.STAGE1 if round_num <= self.stage1_rounds else Phase.STAGE2


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named set-up: the built-in data set it trains on (`data.default_set.SETS`) and the fields
    it sets (every other field keeps ExperimentConfig's default). The programs apply a preset's
    fields where the user gave no flag for them."""

    data_set: str
    fields: dict
    description: str

    def stage1_rounds(self, rounds: int) -> int:
        """Stage 1's rounds for a run of `rounds` rounds: the preset's share of them, rounded down."""
        defaults = ExperimentConfig(data_root="")
        total = self.fields.get("rounds", defaults.rounds)
        first = self.fields.get("stage1_rounds", defaults.stage1_rounds)
        return rounds * first // total


PRESETS = {
    "default": Preset("default", {}, "the CPU default (ExperimentConfig's defaults)"),
    # The CPU set-up of the first privacy front (bench/privacy_front), kept so that its runs resume
    # and its figures can be reproduced.
    "cpu_v1": Preset(
        "v1",
        dict(rounds=50, stage1_rounds=25, local_epochs=1, batch_size=64, server_lr_schedule="constant"),
        "the first privacy front's CPU set-up: 48 x 32 maps, 1 local epoch at batch 64, 50 rounds",
    ),
    # The default set-up on data the defender's twin does not match (`data.reality`).
    "shadowed": Preset("default_shadowed", {}, "the CPU default on the default set's maps with shadow fading and per-map losses the twin lacks"),
}


# Fields added with a default other than the behaviour of the runs saved before them.
LEGACY_VALUES = {"stage2_output": "relu", "matching_maps": 0}
