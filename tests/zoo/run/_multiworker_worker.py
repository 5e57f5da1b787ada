"""One worker of the 2-process tests in test_distribute.py (run as a script).

Usage: python _multiworker_worker.py OUT EPOCHS [CRASH_AT_EPOCH]

Trains a small DenseFlipout regressor on part of concrete under the
"multiworker" strategy (TF_CONFIG from the environment) with the zoo's
backup callback. Prints `EPOCH <i> <loss>` per epoch and `DIGEST <sha256>` of
the final weights; the chief writes OUT/result.json, every worker saves a
model into its worker directory, and non-chief files are removed at the end.
With CRASH_AT_EPOCH, both workers fail at the start of that epoch.
"""

import hashlib
import json
import os
import sys

from zoo.run import distribute

NUM_EXAMPLES = 256
BATCH_SIZE = 32


def main(out, epochs, crash_at=None):
    strategy = distribute.strategy_for("multiworker")  # before any other TF op

    import keras  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from tfp_bnn.callbacks import KLScheduler  # noqa: PLC0415
    from tfp_bnn.data import load_concrete  # noqa: PLC0415
    from tfp_bnn.layers import DenseFlipout  # noqa: PLC0415

    keras.utils.set_random_seed(0)  # the same on both: the shuffles must agree
    x, y = load_concrete()
    x, y = x[:NUM_EXAMPLES], y[:NUM_EXAMPLES]
    x = (x - x.mean(0)) / x.std(0)
    y = ((y - y.mean()) / y.std())[:, None]
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((8,)), DenseFlipout(16, activation="relu", seed=1),
            DenseFlipout(1, seed=2),
        ])
        model.compile(keras.optimizers.Adam(1e-2), "mse")

    class Report(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == crash_at:
                raise RuntimeError(f"planned crash at epoch {epoch}")

        def on_epoch_end(self, epoch, logs=None):
            print(f"EPOCH {epoch} {float(logs['loss'])!r}", flush=True)

    workdir = distribute.worker_directory(out, strategy)
    history = model.fit(
        x, y, batch_size=BATCH_SIZE, epochs=epochs, shuffle=True, verbose=0,
        callbacks=[KLScheduler(NUM_EXAMPLES), distribute.backup_callback(out, strategy),
                   Report()])
    weights = model.get_weights()
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in weights))
    print(f"DIGEST {digest.hexdigest()}", flush=True)
    model.save(os.path.join(workdir, "model.keras"))
    if distribute.is_chief(strategy):
        exact_kl = sum(float(layer.kl_divergence()) for layer in model.layers) / NUM_EXAMPLES
        result = {"history": {k: [float(v) for v in values]
                              for k, values in history.history.items()},
                  "epochs": list(history.epoch), "exact_kl": exact_kl,
                  "num_replicas": strategy.num_replicas_in_sync,
                  "digest": digest.hexdigest()}
        with open(os.path.join(workdir, "result.json"), "w", encoding="utf-8") as stream:
            json.dump(result, stream)
    distribute.finish(out, workdir, strategy)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
