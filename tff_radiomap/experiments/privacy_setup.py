"""What a privacy run is built from: its data set (decoded once), the clients' samples, and the
trainer (`PhasedProcess`, or the centralised reference) that its configuration describes."""

from __future__ import annotations

from tff_radiomap.data import radiomapseer
from tff_radiomap.experiments.defense_registry import DEFENSES
from tff_radiomap.experiments.privacy_config import ExperimentConfig
from tff_radiomap.experiments.privacy_defenses import DataTooSmallError
from tff_radiomap.learning import centralised, federated_data, radiounet_process
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase


def build_trainer(config: ExperimentConfig, data: federated_data.FederatedRadioMaps, data_by_reference: bool = True, basis_dir: str | None = None):
    """The `PhasedProcess` (federated) or `CentralisedReference` that `config` describes.

    Federated clients train with the tensor local loop; with `data_by_reference` (TFF workers that
    see this machine's temporary folder) they read their samples from files, else each round sends
    them. Both give the same results; the NaN test hook needs the data sent. With
    `config.client_placement == 'in_process'` they train in this process instead.
    """
    model_config = config.model_config()
    initial = phases.initial_weights(model_config, config.seed)
    client_opt = radiounet_process.build_optimizer(config.client_optimizer, config.client_learning_rate)
    if config.centralised:
        return centralised.CentralisedReference(model_config, initial, data.pooled_train(), config.phase_for_round, client_opt, config.batch_size, config.seed)
    server_opt = radiounet_process.build_optimizer(config.server_optimizer, config.server_learning_rate)
    defense = DEFENSES[config.defense]
    data_path = dict(
        batch_size=config.batch_size,
        data_by_reference=data_by_reference and not config.nan_injection(),
        client_placement=config.client_placement,
        server_learning_rate=config.server_learning_rate_schedule(),
    )
    if defense.protocol == "fedsgd":
        aggregator = defense.model_aggregator(config, Phase.JOINT, basis_dir)
        return radiounet_process.build_fedsgd_process(model_config, initial, client_opt, server_opt, aggregator, **data_path)
    aggregators = {phase: defense.model_aggregator(config, phase, basis_dir) for phase in (Phase.STAGE1, Phase.STAGE2)}
    return radiounet_process.build_two_stage_process(model_config, initial, config.stage1_rounds, client_opt, server_opt, aggregators, **data_path)


def check_data(config: ExperimentConfig, num_maps: int | None = None) -> None:
    """Raises `DataTooSmallError` naming the flag unless the data root's `num_maps` maps (default:
    those listed in it) serve the map split and `config.num_clients` clients (>= 1 training map each)."""
    if num_maps is None:
        num_maps = len(radiomapseer.list_map_ids(config.data_root))
    try:
        split = radiomapseer.split_maps(num_maps, config.val_fraction, config.test_fraction, config.seed)
    except ValueError as exc:
        raise DataTooSmallError(f"--data_root={config.data_root!r}: {exc} (expected at least 3 maps: validation, test, training)") from exc
    if config.num_clients > len(split.train):
        raise DataTooSmallError(
            f"--clients={config.num_clients}: expected at most the {len(split.train)} training maps of "
            f"--data_root={config.data_root!r} ({num_maps} maps, {len(split.val)} for validation, {len(split.test)} for test)"
        )


def read_maps(config: ExperimentConfig) -> radiomapseer.RadioMapSeer:
    """The run's data set, decoded (at `config.resolution`)."""
    return radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=config.data_root, resolution=config.resolution))


def load_data(config: ExperimentConfig, maps: radiomapseer.RadioMapSeer | None = None) -> federated_data.FederatedRadioMaps:
    """The clients', validation and test samples of the run; `maps`: the data set if already read."""
    maps = read_maps(config) if maps is None else maps
    check_data(config, len(maps.map_ids))
    return federated_data.FederatedRadioMaps.load(maps, config.num_clients, config.seed, config.val_fraction, config.test_fraction)
