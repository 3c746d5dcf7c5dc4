"""The FedAvg baseline equals TFF's build_weighted_fed_avg on the same data, model and seed."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from baselines.fedavg import fedavg
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import epfl_remnet, rem_runner
from tff_radiomap.models import remnet


def test_matches_build_weighted_fed_avg(tff_runtime):
    scenario = tiny_scenario(train_sizes=(5, 9, 12))
    method = fedavg(tiny_config(local_epochs=2, batch_size=4, shuffle=False, client_optimizer="sgd", client_learning_rate=0.1))
    config = method.config
    data, n_max = rem_runner.padded_client_data(scenario)
    process, layout = epfl_remnet.build_process(config, epfl_remnet.client_data_type(n_max, scenario.num_features, scenario.num_outputs), method.local, seed=7)
    state = process.initialize()
    client_states = [epfl_remnet.initial_client_state(config, layout, seed=i) for i in range(3)]
    for _ in range(2):
        state, client_states, _ = process.next(state, client_states, data)

    def model_fn():
        return tff.learning.models.from_keras_model(
            remnet.build_remnet(config.model),
            loss=remnet.huber_loss(config.model),
            input_spec=collections.OrderedDict(
                x=tf.TensorSpec([None, scenario.num_features], tf.float32), y=tf.TensorSpec([None, scenario.num_outputs], tf.float32)
            ),
        )

    reference = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    ref_state = reference.initialize()
    ref_state = reference.set_model_weights(ref_state, tff.learning.models.ModelWeights(trainable=list(layout.initial_shared), non_trainable=[]))
    datasets = [tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=c.x_train, y=c.y_train)).batch(4).repeat(2) for c in scenario.clients]
    for _ in range(2):
        ref_state = reference.next(ref_state, datasets).state
    expected = reference.get_model_weights(ref_state).trainable
    got = [state["model"]["shared"][k] for k in layout.shared_keys]
    assert len(got) == len(expected)
    moved = 0.0
    for g, e, init in zip(got, expected, layout.initial_shared):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
        moved = max(moved, float(np.abs(g - init).max()))
    assert moved > 1e-3  # The comparison is about trained weights, not two copies of the init.
