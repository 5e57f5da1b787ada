"""What reliability costs: resumable data order, checkpoints, one thread.

    python benchmarks/reliability.py            # ~3-5 minutes on 2 CPU cores
    python benchmarks/reliability.py --quick    # a smoke run

`python -m zoo train` now feeds `fit` from `tfp_bnn.data.shuffled_epochs`
(an order that depends on seed and epoch only) instead of NumPy arrays with
`shuffle=True`, saves an `AtomicBackupAndRestore` checkpoint at every epoch
end behind a `DivergenceGuard`, and runs TensorFlow on one thread by default
(bit-identical runs). This times whole `fit` calls (default 10 epochs) for

    plain        arrays, shuffle=True, KLScheduler only (the old path)
    resumable    shuffled_epochs + DivergenceGuard + AtomicBackupAndRestore
                 saving at most every 2 s (what `train` does)
    every epoch  the same, saving at every epoch end (Keras' default)

each under one thread and under TensorFlow's default threading. Every
setting runs in its own worker process (threads are fixed per process);
inside a worker the variants are warmed up (tracing), then alternate fit by
fit in rotated order for 3 rounds; the median seconds per epoch is kept. Models: bbb_mlp on
concrete (927 rows, batch 32) and flipout_lenet on digits (1437 rows, batch 32).
The printed ratios are measured side by side within this run.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time

import _common  # noqa: F401  (first: TF start-up notices off, the repository on sys.path)

CASES = (("bbb_mlp", "concrete"), ("flipout_lenet", "digits"))


def worker(model_name, dataset, threads, epochs, rounds=3):
    """Runs in a fresh process: prints JSON {variant: median epoch seconds}."""
    from zoo.run import runner  # noqa: PLC0415

    runner.set_threads(threads)
    import keras  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from tfp_bnn.callbacks import AtomicBackupAndRestore  # noqa: PLC0415
    from tfp_bnn.callbacks import DivergenceGuard  # noqa: PLC0415
    from tfp_bnn.callbacks import KLScheduler  # noqa: PLC0415
    from tfp_bnn.data import shuffled_epochs  # noqa: PLC0415
    from tfp_bnn.data import steps_per_epoch  # noqa: PLC0415
    from zoo.run import datasets  # noqa: PLC0415
    from zoo.models import registry  # noqa: PLC0415

    task = datasets.load(dataset)
    num = len(task.x_train)

    def build():
        keras.utils.set_random_seed(0)
        return registry.build_model(model_name, task.input_shape, task=task.task,
                                    num_classes=task.num_classes, num_train=num, seed=0)

    variants = ("plain", "resumable", "every_epoch")
    models = {name: build() for name in variants}
    times = {name: [] for name in variants}

    def run(name, epochs):
        """One fit of `epochs` epochs; returns seconds per epoch."""
        model = models[name]
        callbacks = [KLScheduler(num)]
        start = time.perf_counter()
        if name == "plain":
            model.fit(task.x_train, task.y_train, batch_size=32, epochs=epochs,
                      shuffle=True, verbose=0, callbacks=callbacks)
        else:
            backup = AtomicBackupAndRestore(tempfile.mkdtemp(prefix="reliability-"),
                                            save_interval=2.0 if name == "resumable" else 0)
            data = shuffled_epochs(task.x_train, task.y_train, 32, 0, epochs)
            model.fit(data, epochs=epochs, shuffle=False,
                      steps_per_epoch=steps_per_epoch(num, 32), verbose=0,
                      callbacks=callbacks + [DivergenceGuard(), backup])
        return (time.perf_counter() - start) / epochs

    for name in variants:  # warm-up: tracing
        run(name, 1)
    for round_index in range(rounds):
        order = variants[round_index % 3:] + variants[:round_index % 3]
        for name in order:
            times[name].append(run(name, epochs))
    print("RESULT " + json.dumps({name: float(np.median(t)) for name, t in times.items()}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round of 2-epoch fits")
    parser.add_argument("--epochs", type=int, default=10, help="epochs per timed fit")
    parser.add_argument("--rounds", type=int, default=3, help="timed fits per variant")
    args = parser.parse_args(argv)
    epochs, rounds = (2, 1) if args.quick else (args.epochs, args.rounds)
    rows = []
    for model_name, dataset in CASES:
        result = {}
        for threads in (1, 0):
            command = [sys.executable, __file__, "--worker", model_name, dataset,
                       str(threads), str(epochs), str(rounds)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if done.returncode or not lines:
                raise SystemExit(f"worker failed: {done.stderr[-2000:]}")
            result[threads] = json.loads(lines[-1][len("RESULT "):])
        rows.append((model_name, dataset, result))
    print(f"seconds per epoch, median of {rounds} fits of {epochs} epochs per variant\n")
    print(f"{'model':14s} {'data':9s} {'threads':>8s} {'plain':>8s} {'resumable':>10s} "
          f"{'every epoch':>12s} {'resumable/plain':>16s} {'every/plain':>12s}")
    for model_name, dataset, result in rows:
        for threads in (1, 0):
            row = result[threads]
            plain, resumable, every = row["plain"], row["resumable"], row["every_epoch"]
            label = "1" if threads == 1 else "default"
            print(f"{model_name:14s} {dataset:9s} {label:>8s} {plain:8.3f} {resumable:10.3f} "
                  f"{every:12.3f} {resumable / plain:16.2f} {every / plain:12.2f}")
    print("\nzoo default (1 thread, resumable) / old default (all threads, plain):")
    for model_name, dataset, result in rows:
        ratio = result[1]["resumable"] / result[0]["plain"]
        print(f"  {model_name} on {dataset}: {ratio:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
