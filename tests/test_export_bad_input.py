"""tfp_bnn.export with bad arguments or a failing write: a clear error and nothing on disk.

The exporters check their arguments before writing anything, write the
SavedModel into a hidden sibling directory and rename it into place at the
end; a failure removes the staging directory and any parent it created.
"""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn.export import export_predictive
from tfp_bnn.export import export_saved_model
from tfp_bnn.layers import DenseFlipout

EXPORTERS = {"export_predictive": export_predictive, "export_saved_model": export_saved_model}


@pytest.fixture(scope="module")
def model():
    return keras.Sequential([keras.Input((3,)), DenseFlipout(2, kl_weight=0.0, seed=0)])


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("kind", ["file", "directory"])
def test_existing_path_is_not_overwritten(model, tmp_path, exporter, kind):
    user_file = tmp_path / "taken"
    if kind == "directory":
        user_file.mkdir()
        user_file = user_file / "keep.txt"
    user_file.write_text("user data")
    with pytest.raises(ValueError, match=re.escape(f"Export path '{tmp_path / 'taken'}' "
                                                   "already exists")):
        EXPORTERS[exporter](model, tmp_path / "taken")
    assert user_file.read_text() == "user data"
    assert _tree(tmp_path) == sorted({"taken", os.path.relpath(user_file, tmp_path)})


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("below", [("out",), ("a", "b", "out")])
def test_path_under_a_regular_file(model, tmp_path, exporter, below):
    # Tests run as root, where a chmod-ed directory stays writable; a path
    # below a regular file cannot be created by anyone.
    (tmp_path / "file").write_text("x")
    target = tmp_path.joinpath("file", *below)
    with pytest.raises(ValueError, match=re.escape(f"Cannot export to '{target}': "
                                                   f"'{tmp_path / 'file'}' is a file, not a "
                                                   "directory")):
        EXPORTERS[exporter](model, target)
    assert _tree(tmp_path) == ["file"]


@pytest.mark.parametrize(
    "exporter, make_model, kwargs, pattern",
    [
        ("export_predictive", lambda m: keras.Sequential([DenseFlipout(2)]), {},
         r"The model is not built"),
        ("export_saved_model", lambda m: keras.Sequential([DenseFlipout(2)]), {},
         r"The model is not built"),
        ("export_predictive", lambda m: "model.keras", {}, r"`model` must be a Keras model or "
                                                           r"layer, got str"),
        ("export_saved_model", lambda m: None, {}, r"`model` must be a Keras model or layer, "
                                                   r"got NoneType"),
        ("export_predictive", lambda m: m, {"task": "ranking"},
         r"`task` must be one of \['classification', 'regression'\], got 'ranking'"),
        ("export_predictive", lambda m: m, {"task": "classification", "output": "mean"},
         r"`output` for task='classification' must be one of"),
        ("export_predictive", lambda m: m, {"output": "logits"},
         r"`output` for task='regression' must be one of .*got 'logits'"),
        ("export_predictive", lambda m: m, {"noise_variance": 1.0},
         r"`noise_variance` is only for task='regression', output='mean'"),
        ("export_predictive", lambda m: m, {"samples_per_call": True},
         r"`samples_per_call` must be an int in 1..1,000,000, got True"),
        ("export_predictive", lambda m: m, {"output": "mean", "noise_variance": float("nan")},
         r"`noise_variance` must be a finite number > 0, got nan"),
        ("export_predictive",
         lambda m: keras.Sequential([keras.Input((3,)), DenseFlipout(3, kl_weight=0.0)]), {},
         r"output='mean_log_variance' needs an even last axis .*shape \(None, 3\)"),
        ("export_predictive",
         lambda m: keras.Sequential([keras.Input((3,)), DenseFlipout(1, kl_weight=0.0)]),
         {"task": "classification"}, r"A classifier needs >= 2 classes .*shape \(None, 1\)"),
    ],
)
def test_bad_arguments_write_nothing(model, tmp_path, exporter, make_model, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        EXPORTERS[exporter](make_model(model), tmp_path / "out", **kwargs)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("path", ["", None, 3])
def test_bad_path_types(model, path):
    with pytest.raises(ValueError, match=r"The export path must be a non-empty str or path"):
        export_saved_model(model, path)


def _failing_write_out(monkeypatch, error):
    """Makes the archive write a real SavedModel, then fail (a disk filling up)."""
    archive_class = type(keras.export.ExportArchive())
    original = archive_class.write_out

    def write_out(self, path, **kwargs):
        original(self, path, **kwargs)
        assert os.listdir(path), "the failure should come after a partial write"
        raise error

    monkeypatch.setattr(archive_class, "write_out", write_out)


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
def test_failed_write_leaves_nothing(model, tmp_path, monkeypatch, exporter):
    _failing_write_out(monkeypatch, OSError(28, "No space left on device"))
    target = tmp_path / "new" / "dirs" / "out"
    with pytest.raises(ValueError, match=re.escape(f"Writing the SavedModel to '{target}' "
                                                   "failed: [Errno 28] No space left")) as info:
        EXPORTERS[exporter](model, target)
    assert isinstance(info.value.__cause__, OSError)
    # The staging directory and the parents created for it are gone.
    assert _tree(tmp_path) == []


def test_unexpected_errors_propagate_and_clean_up(model, tmp_path, monkeypatch):
    _failing_write_out(monkeypatch, RuntimeError("interrupted"))
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(RuntimeError, match="interrupted"):
        export_predictive(model, tmp_path / "out")
    assert _tree(tmp_path) == ["keep.txt"]


def test_successful_export_leaves_only_the_target(model, tmp_path):
    target = tmp_path / "made" / "out"
    assert export_predictive(model, target) == target
    assert _tree(tmp_path)[:2] == ["made", os.path.join("made", "out")]
    assert not [name for name in os.listdir(tmp_path / "made") if name.startswith(".")]
    assert (target / "saved_model.pb").is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o777 & ~umask
    served = tfp_bnn.load_predictive(target)
    out = served.serve(np.ones((4, 3), "float32"), tf.constant(3))
    assert out["mean"].shape == (4, 1)


# -- sizes: the served sample count, samples_per_call ------------------------

@pytest.fixture(scope="module")
def served_predictive(model, tmp_path_factory):
    return tf.saved_model.load(export_predictive(model, tmp_path_factory.mktemp("ex") / "out"))


@pytest.mark.parametrize("num_samples", [0, 10**6 + 1, 2**31 - 24, 2**31 - 1])
def test_served_num_samples_outside_the_predict_limit_is_refused(served_predictive,
                                                                 num_samples):
    # From 2**31 - 24 on, the chunk count wrapped around in int32: the loop
    # stopped early and plausible means came back with epistemic variance 0.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape("`num_samples` must be an int in 1..1,000,000 (the "
                                       "limit of tfp_bnn.predict)")):
        served_predictive.serve(np.ones((2, 3), "float32"), tf.constant(num_samples))


def test_served_batch_over_the_rows_per_call_limit_is_refused(model, tmp_path):
    served = tf.saved_model.load(export_predictive(model, tmp_path / "out",
                                                   samples_per_call=10**6))
    assert served.serve(np.ones((4, 3), "float32"), tf.constant(2))["mean"].shape == (4, 1)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape("the inputs tiled `samples_per_call` = 1,000,000 times "
                                       "must be at most 4,194,304 rows per step: serve at most "
                                       "4 inputs per call")):
        served.serve(np.ones((5, 3), "float32"), tf.constant(2))


def test_samples_per_call_over_the_sample_limit_is_refused(model, tmp_path):
    with pytest.raises(ValueError, match=re.escape("`samples_per_call` must be an int in "
                                                   "1..1,000,000, got 1000000000.")):
        export_predictive(model, tmp_path / "out", samples_per_call=10**9)
    assert _tree(tmp_path) == []


def test_samples_per_call_whose_draws_cannot_fit_is_refused(tmp_path):
    # 1,000,000 samples of 4 million variational weights: about 15 TB.
    wide = keras.Sequential([keras.Input((1000,)), DenseFlipout(1000, kl_weight=0.0)])
    with pytest.raises(ValueError, match=r"^1,000,000 weight samples per call of the model's "
                                         r"variational layers would need .* GiB, over half of "
                                         r"this machine's memory .*; pass a smaller "
                                         r"`samples_per_call`\.$"):
        export_predictive(wide, tmp_path / "out", task="classification",
                          samples_per_call=10**6)
    assert _tree(tmp_path) == []
