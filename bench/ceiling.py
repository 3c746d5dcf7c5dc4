"""The ceiling of the privacy experiment's model: the centralised two-stage RadioUNet trained to
convergence, with early stopping on the validation maps.

The data are split by map as the privacy experiment splits them (`radiomapseer.split_maps`, the
same fractions and seed), and the training maps are pooled. Stage 1 trains with Adam in epochs over
the pooled maps; after each epoch the validation MSE is taken, and training stops when it has not
improved for `--patience` epochs (at most `--max_epochs`); the best epoch's weights are kept. Stage 2
then trains the same way on the frozen best stage 1. Printed and written (`--output` JSON, one
record a run): validation and test MSE in dB, the RMSE of the gain in dB over all pixels and over the
outdoor ones, for stage 1 alone and the two-stage model, the number of parameters, the epochs and the
wall time.

    python -m bench.ceiling --width=0.25 --output=bench/operating_point/ceiling/default_w0.25.json
    python -m bench.ceiling --data_root=/data/s192x32 --width=0.5 --output=...
    python -m bench.ceiling --report=bench/operating_point/ceiling   # ceiling.md from the JSON files
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tff_radiomap.data import default_set, radiomapseer
from tff_radiomap.metrics import reconstruction
from tff_radiomap.models import radiounet
from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.data.synthetic import write_json

FLAGS = flags.FLAGS
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout root; default: the built-in default set.")
flags.DEFINE_integer("resolution", 64, "Model resolution (pixels a side).")
flags.DEFINE_float("width", 0.25, "RadioUNet width multiplier.")
flags.DEFINE_integer("batch_size", 16, "Batch size.")
flags.DEFINE_float("learning_rate", 1e-3, "Adam's learning rate.")
flags.DEFINE_integer("patience", 8, "Epochs without a better validation MSE before a stage stops.")
flags.DEFINE_integer("max_epochs", 150, "Epochs at most a stage.")
flags.DEFINE_integer("seed", 0, "Split and initialisation seed (the privacy experiment's --seed).")
flags.DEFINE_integer("maps", None, "Use only the first N maps of the set.")
flags.DEFINE_boolean("stage2", True, "Also train stage 2 on the frozen best stage 1.")
flags.DEFINE_string("name", None, "Name of the data set in the table (default: its folder's name).")
flags.DEFINE_string("output", None, "JSON file to append the run's record to (a list of records).")
flags.DEFINE_string("report", None, "Write FOLDER/../ceiling.md from the records of FOLDER/*.json and train nothing.")


def _scores(evaluator: reconstruction.Evaluator, net: radiounet.RadioUNet, phase: Phase) -> dict[str, float]:
    """The record's scores of `net`'s output of `phase` on the evaluator's set."""
    scores = evaluator.scores(NetworkWeights.from_network(net), phase)
    return {"mse_db": reconstruction.mse_db(scores["mse"]), "rmse_db": scores["rmse_db"], "outdoor_rmse_db": scores["outdoor_rmse_db"]}


def _train_stage(model: tf.keras.Model, inputs, y, val_inputs, val_y, seed: int) -> tuple[int, int]:
    """Trains `model` with early stopping; keeps its best weights. Returns (best epoch, epochs run)."""
    model.compile(optimizer=tf.keras.optimizers.Adam(FLAGS.learning_rate), loss="mse")
    stop = tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=FLAGS.patience, restore_best_weights=True)
    tf.keras.utils.set_random_seed(seed)
    history = model.fit(
        inputs,
        y,
        batch_size=FLAGS.batch_size,
        epochs=FLAGS.max_epochs,
        validation_data=(val_inputs, val_y),
        validation_batch_size=128,
        shuffle=True,
        callbacks=[stop],
        verbose=0,
    )
    losses = history.history["val_loss"]
    return int(np.argmin(losses)) + 1, len(losses)


def run() -> dict:
    root = FLAGS.data_root or default_set.ensure_default_dataset()
    maps = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=FLAGS.resolution, maps=FLAGS.maps))
    split = radiomapseer.split_maps(len(maps.map_ids), seed=FLAGS.seed)
    train, val, test = (maps.arrays(part) for part in (split.train, split.val, split.test))
    config = radiounet.RadioUNetConfig(resolution=FLAGS.resolution, width=FLAGS.width, stage2_output="linear")
    tf.keras.utils.set_random_seed(FLAGS.seed)
    net = radiounet.build_radiounet(config)
    record = {
        "data_root": root,
        "data_name": FLAGS.name or os.path.basename(os.path.normpath(root)),
        "maps": {"train": len(split.train), "val": len(split.val), "test": len(split.test)},
        "samples": {"train": len(train["x"]), "val": len(val["x"]), "test": len(test["x"])},
        "resolution": FLAGS.resolution,
        "width": FLAGS.width,
        "batch_size": FLAGS.batch_size,
        "learning_rate": FLAGS.learning_rate,
        "patience": FLAGS.patience,
        "seed": FLAGS.seed,
        "parameters": {"stage1": int(net.stage1.count_params()), "stage2": int(net.stage2.count_params())},
    }

    evaluators = {"val": reconstruction.Evaluator(config, val["x"], val["y"]), "test": reconstruction.Evaluator(config, test["x"], test["y"])}

    t0 = time.monotonic()
    best, ran = _train_stage(net.stage1, train["x"], train["y"], val["x"], val["y"], FLAGS.seed)
    record["stage1"] = {"best_epoch": best, "epochs": ran, "seconds": time.monotonic() - t0}
    record["stage1"].update({name: _scores(evaluator, net, Phase.STAGE1) for name, evaluator in evaluators.items()})
    print(f"stage 1: best epoch {best} of {ran}, val {record['stage1']['val']}", flush=True)

    if FLAGS.stage2:
        t1 = time.monotonic()
        net.stage1.trainable = False
        coarse = {name: net.stage1.predict(part["x"], batch_size=128, verbose=0) for name, part in (("train", train), ("val", val))}
        best, ran = _train_stage(net.stage2, [train["x"], coarse["train"]], train["y"], [val["x"], coarse["val"]], val["y"], FLAGS.seed + 1)
        record["stage2"] = {"best_epoch": best, "epochs": ran, "seconds": time.monotonic() - t1}
        record["stage2"].update({name: _scores(evaluator, net, Phase.STAGE2) for name, evaluator in evaluators.items()})
        print(f"stage 2: best epoch {best} of {ran}, val {record['stage2']['val']}", flush=True)
    record["seconds"] = time.monotonic() - t0
    return record


def table(records: list[dict]) -> str:
    """ceiling.md: one row a record (validation MSE, gain RMSE over all and outdoor pixels, of
    stage 1 alone and of the two-stage model; test MSE; parameters; epochs; wall time)."""
    lines = [
        "# The ceiling: the centralised RadioUNet trained to convergence",
        "",
        "Early stopping on the validation maps (patience in epochs; the best epoch's weights kept), Adam, the",
        "privacy experiment's map-level split. MSE of the normalized gain in dB; RMSE of the gain in dB",
        "(79.33 dB x sqrt(MSE) over all pixels; outdoor: building cover below one half). Command:",
        "`python -m bench.ceiling --data_root=ROOT --width=W --output=FILE` (`bench/ceiling.py`).",
        "",
        "| data (train maps x tx) | width | params (stage 1 + 2) | stage 1 val MSE dB | two-stage val MSE dB | val RMSE dB all / outdoor | test MSE dB | epochs (stage 1, 2) | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        final = r.get("stage2", r["stage1"])
        lines.append(
            f"| {r['data_name']} ({r['maps']['train']} x {r['samples']['train'] // r['maps']['train']}) | {r['width']} | "
            f"{r['parameters']['stage1']:,} + {r['parameters']['stage2']:,} | {r['stage1']['val']['mse_db']:.2f} | "
            f"{final['val']['mse_db']:.2f} | {final['val']['rmse_db']:.2f} / {final['val']['outdoor_rmse_db']:.2f} | {final['test']['mse_db']:.2f} | "
            f"{r['stage1']['epochs']}, {r.get('stage2', {}).get('epochs', '-')} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    if FLAGS.report:
        records = []
        for name in sorted(os.listdir(FLAGS.report)):
            if name.endswith(".json"):
                for record in json.load(open(os.path.join(FLAGS.report, name))):
                    records.append({**record, "data_name": record.get("data_name", os.path.basename(record["data_root"]))})
        path = os.path.join(os.path.dirname(os.path.abspath(FLAGS.report)), "ceiling.md")
        with open(path, "w") as f:
            f.write(table(records))
        print(open(path).read())
        return
    record = run()
    print(json.dumps(record, indent=1))
    if FLAGS.output:
        records = json.load(open(FLAGS.output)) if os.path.exists(FLAGS.output) else []
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        write_json(FLAGS.output, records + [record])


if __name__ == "__main__":
    app.run(main)
