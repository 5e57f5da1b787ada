"""zoo.run.progress: plain progress is one line per interval with no control characters;
a terminal gets Keras' bar, a quiet run nothing.
"""

import io
import re

import keras
import numpy as np
import pytest

from zoo.run import progress

LINE = re.compile(r"epoch +\d+/\d+( +(loss|data_loss|kl|accuracy) [-0-9.e+]+)* +\d+s")


def test_plain_progress_lines():
    stream = io.StringIO()
    verbose, callbacks = progress.progress(1, 25, stream=stream)
    assert verbose == 0 and len(callbacks) == 1
    callback = callbacks[0]
    callback.on_train_begin()
    for epoch in range(25):
        callback.on_epoch_end(epoch, {"loss": 1.5 - epoch / 100, "data_loss": 1.25, "kl": 0.25})
    lines = stream.getvalue().splitlines()
    # Every 25 // 10 = 2 epochs, and the last one.
    assert [int(line.split()[1].split("/")[0]) for line in lines] == \
        list(range(2, 25, 2)) + [25]
    assert all(LINE.fullmatch(line) for line in lines), lines
    assert lines[0].startswith("epoch  2/25  loss 1.49  data_loss 1.25  kl 0.25  ")
    assert not re.search(r"[\x1b\r\b]", stream.getvalue())


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_picks_the_bar_on_a_terminal_and_nothing_when_quiet():
    assert progress.progress(1, 400, stream=_Terminal()) == (1, [])
    assert progress.progress(0, 400, stream=io.StringIO()) == (0, [])
    assert progress.progress(False, 400, stream=_Terminal()) == (0, [])
    with pytest.raises(ValueError, match="`epochs` must be a positive int"):
        progress.progress(1, 0, stream=io.StringIO())


def test_plain_progress_under_fit():
    stream = io.StringIO()
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((8, 2), "float32")
    verbose, callbacks = progress.progress(1, 3, stream=stream)
    model.fit(x, x[:, :1], epochs=3, verbose=verbose, callbacks=callbacks)
    lines = stream.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    assert all(LINE.fullmatch(line) for line in lines), lines
