"""Training progress: Keras' bar on a terminal, plain lines everywhere else.

Keras' progress bar redraws itself with carriage returns and backspaces;
written to a file, a pipe or a CI log it becomes one long line per epoch
full of control characters. `progress(verbose, epochs)` picks the bar when
stdout is a terminal and otherwise a callback printing about ten plain lines
per run:

    epoch  40/400  loss 1.234  data_loss 1.101  kl 0.133  5s

Example:
>>> import io
>>> log = io.StringIO()   # a file or pipe: one plain line per epoch, no bar
>>> fit_verbose, callbacks = progress(verbose=1, epochs=2, stream=log)
>>> x, y = np.random.rand(8, 3), np.random.rand(8)
>>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
>>> model.compile("sgd", "mse")
>>> history = model.fit(x, y, epochs=2, verbose=fit_verbose, callbacks=callbacks)
>>> fit_verbose, log.getvalue().count("epoch")
(0, 2)
"""

import sys
import time

import keras

from tfp_bnn import _validation as check

# Plain progress lines per run (plus the last epoch's).
NUM_LINES = 10
# The logs a line shows, when `fit` reports them.
LOG_KEYS = ("loss", "data_loss", "kl", "accuracy")


class PlainProgress(keras.callbacks.Callback):
    """Prints one plain line every `every` epochs and after the last one.

    No ANSI codes, carriage returns or backspaces: a line per report, as a
    log file or CI wants it.

    Args:
        epochs: total epochs of the run.
        every: epochs between lines (default: about NUM_LINES lines a run).
        stream: where to print (default: sys.stdout at print time).
        start: `time.perf_counter()` the elapsed seconds count from
            (default: the start of training).
    """

    def __init__(self, epochs, every=None, stream=None, start=None):
        super().__init__()
        epochs = check.integer("epochs", epochs)
        every = check.integer("every", max(1, epochs // NUM_LINES) if every is None else every)
        self.epochs = epochs
        self.every = every
        self.stream = stream
        self.start = start

    def on_train_begin(self, logs=None):
        if self.start is None:
            self.start = time.perf_counter()

    def line(self, epoch, logs):
        """The line after `epoch` (0-based) with `logs`."""
        done = epoch + 1
        parts = [f"epoch {done:{len(str(self.epochs))}d}/{self.epochs}"]
        for key in LOG_KEYS:
            if key in (logs or {}):
                parts.append(f"{key} {float(logs[key]):.4g}")
        start = time.perf_counter() if self.start is None else self.start
        parts.append(f"{time.perf_counter() - start:.0f}s")
        return "  ".join(parts)

    def on_epoch_end(self, epoch, logs=None):
        done = epoch + 1
        if done % self.every and done != self.epochs:
            return
        stream = self.stream or sys.stdout
        print(self.line(epoch, logs), file=stream, flush=True)


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(verbose, epochs, stream=None):
    """Keras' `fit` verbosity and callbacks that show a run's progress.

    Args:
        verbose: falsy for no progress, else Keras' verbosity (1: the bar).
        epochs: total epochs of the run.
        stream: the output the user sees (default sys.stdout).

    Returns:
        (fit_verbose, callbacks): (verbose, []) on a terminal, where Keras
        draws its bar; (0, [PlainProgress]) when `stream` is a file or pipe;
        (0, []) when quiet.
    """
    if not verbose:
        return 0, []
    stream = sys.stdout if stream is None else stream
    if _is_terminal(stream):
        return verbose, []
    return 0, [PlainProgress(epochs, stream=stream)]
