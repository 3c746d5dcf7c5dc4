"""The observers' phase models and traced upload functions, shared by the runs of one process.

A run's observers (the attacks, the basis refresher, the allocator) each need the phase's model and
functions traced over the clients' local steps on it. Building the Keras model costs about a second
and tracing a function several (2026-12-05, the 2026-12-05 machine: 13 s of model builds and 18 s of
the matching attacker's tracing in the three tiny runs of the Subspace tests), every run anew. A
process that runs several runs one after another (`privacy_front --jobs=1`, `attack_runs` over
several folders, the tests) shares them here instead:

- a model is a pure container of weights: every user sets the global weights it needs right before
  using it (`phases.set_phase_weights`), and the runs of one process never overlap;
- the shared functions close over the model, the client optimizer and the number of steps only
  (`matching_uploads.UploadTraces`, `leakage_basis.UploadCollector`), never over a run's defense.

The ridge's `attack.TraceCollector` closes over the run's defense factory and stays the run's own.
"""

from __future__ import annotations

from tff_radiomap.learning import local_training, radiounet_process
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase
from tff_radiomap.models.radiounet import RadioUNetConfig
from tff_radiomap.privacy import candidate_gradients as candidate_gradients_lib
from tff_radiomap.privacy import leakage_basis, matching_uploads

_SHARED: dict = {}  # (kind, key...) -> the object built once.


def _once(key: tuple, build):
    if key not in _SHARED:
        _SHARED[key] = build()
    return _SHARED[key]


def phase_model(model_config: RadioUNetConfig, phase: Phase):
    """The process's model of `phase`'s uploaded layers (weights: whatever its last user set)."""
    return _once(("model", model_config, Phase(phase)), lambda: phases.build_phase_model(model_config, Phase(phase)))


def upload_traces(model_config: RadioUNetConfig, phase: Phase, optimizer: str, learning_rate: float, steps: int) -> matching_uploads.UploadTraces:
    """The matching attacker's `UploadTraces` on `phase_model`, the client optimizer `optimizer` at
    `learning_rate` and `steps` local steps."""
    return _once(
        ("traces", model_config, Phase(phase), optimizer, float(learning_rate), int(steps)),
        lambda: matching_uploads.UploadTraces(
            phase_model(model_config, phase), radiounet_process.build_optimizer(optimizer, learning_rate), steps, local_updates=local_training.local_updates
        ),
    )


def upload_collector(model_config: RadioUNetConfig, phase: Phase, optimizer: str, learning_rate: float) -> leakage_basis.UploadCollector:
    """The `UploadCollector` of first uploads on `phase_model` (the basis refresher's and the
    adaptive allocator's)."""
    return _once(
        ("collector", model_config, Phase(phase), optimizer, float(learning_rate)),
        lambda: leakage_basis.UploadCollector(
            phase_model(model_config, phase), radiounet_process.build_optimizer(optimizer, learning_rate), local_training.local_updates
        ),
    )


def candidate_gradients(model_config: RadioUNetConfig, phase: Phase) -> candidate_gradients_lib.CandidateGradients:
    """The deployment observer's per-sample gradients on `phase_model`."""
    return _once(("gradients", model_config, Phase(phase)), lambda: candidate_gradients_lib.CandidateGradients(phase_model(model_config, phase)))


def client_trainer(model_config: RadioUNetConfig, phase: Phase, optimizer: str, learning_rate: float, batch_size: int, one_step: bool = False):
    """A client's whole local training on `phase_model` (`local_training.ClientTrainer`): epochs of
    `batch_size` batches, or FedSGD's one step (`one_step`)."""
    steps = local_training.LocalSteps.ONE_STEP if one_step else local_training.LocalSteps.EPOCHS
    return _once(
        ("trainer", model_config, Phase(phase), optimizer, float(learning_rate), int(batch_size), steps),
        lambda: local_training.ClientTrainer(
            phase_model(model_config, phase), radiounet_process.build_optimizer(optimizer, learning_rate), int(batch_size), steps
        ),
    )
