"""Bad arguments to the zoo's Python API: zoo.build_model, zoo.get_spec, zoo.run.datasets.load.

Every case fails before a model is built or a file is read to the end, with
a ValueError that names the argument (or file and line) and lists what is
valid where that helps.
"""

import re

import pytest

import zoo
from zoo.run import datasets

MODELS = re.escape(str(zoo.list_models()))
BUILTIN = re.escape(str(list(datasets.BUILTIN)))


@pytest.mark.parametrize(
    "name, pattern",
    [
        ("flipout", rf"Unknown model 'flipout'; available: {MODELS}\. Did you mean "
                    r"'flipout_mlp'\?"),
        ("resnet50", rf"Unknown model 'resnet50'; available: {MODELS}\.$"),
        (None, rf"Unknown model None; available: {MODELS}"),
        ("", rf"Unknown model ''; available: {MODELS}"),
    ],
)
def test_unknown_model_lists_the_valid_names(name, pattern):
    with pytest.raises(ValueError, match=pattern):
        zoo.get_spec(name)
    with pytest.raises(ValueError, match=pattern):
        zoo.build_model(name, (3,), num_train=10)


BAD_BUILDS = [
    # (name, kwargs, pattern)
    ("flipout_mlp", {"task": "ranking"},
     r"Unknown task 'ranking'; `task` must be one of \['regression', 'classification'\]"),
    ("flipout_mlp_heteroscedastic", {"task": "classification", "num_classes": 3},
     r"Model 'flipout_mlp_heteroscedastic' does not support task 'classification'; it "
     r"supports \['regression'\]"),
    ("bayesian_transformer", {"task": "classification", "num_classes": 3},
     r"does not support task 'classification'"),
    ("flipout_mlp", {"task": "classification"},
     r"`num_classes` must be an int >= 2, got None"),
    ("mc_dropout_mlp", {"task": "classification", "num_classes": 1},
     r"`num_classes` must be an int >= 2, got 1"),
    ("bbb_mlp", {"task": "classification", "num_classes": 3.0},
     r"`num_classes` must be an int >= 2, got 3.0"),
    ("flipout_mlp", {"num_classes": 4}, r"`num_classes` is only for classification, got 4"),
    ("flipout_lenet", {"input_shape": (64,), "task": "classification", "num_classes": 10},
     r"flipout_lenet needs image inputs \[height, width, channels\].*got input_shape \(64,\)"),
    ("flipout_lenet", {"input_shape": (2, 2, 1), "task": "classification", "num_classes": 10},
     r"at least 4x4, got input_shape \(2, 2, 1\)"),
    ("bayesian_transformer", {"input_shape": (8, 8, 1)},
     r"bayesian_transformer reads \[J\] or \[J, 1\] inputs.*got input_shape \(8, 8, 1\)"),
    ("flipout_mlp", {"input_shape": 8}, r"`input_shape` must be a non-empty tuple of "
                                        r"positive ints, got 8"),
    ("flipout_mlp", {"input_shape": (8, -1)}, r"`input_shape` must be a non-empty tuple of "
                                              r"positive ints, got \(8, -1\)"),
    ("flipout_mlp", {"input_shape": (8.0,)}, r"`input_shape` .*got \(8.0,\)"),
    ("flipout_mlp", {"input_shape": (None, 3)}, r"`input_shape` .*got \(None, 3\)"),
    ("flipout_mlp", {"input_shape": ()}, r"`input_shape` must be a non-empty tuple"),
    ("flipout_mlp", {"num_train": None}, r"`num_train` must be a positive int, got None"),
    ("flipout_mlp", {"num_train": 0}, r"`num_train` must be a positive int, got 0"),
    ("flipout_mlp", {"seed": -1}, r"`seed` must be a non-negative int, got -1"),
    ("flipout_mlp", {"learning_rate": 0}, r"`learning_rate` must be a finite number > 0, "
                                          r"got 0"),
    ("bbb_mlp", {"learning_rate": float("nan")}, r"`learning_rate` must be a finite number "
                                                 r"> 0, got nan"),
    ("mc_dropout_mlp", {"learning_rate": "fast"}, r"`learning_rate` .*got 'fast'"),
    ("mc_dropout_mlp", {"rate": 1.5}, r"`rate` must be a number in \[0, 1\), got 1.5"),
    ("mc_dropout_mlp", {"rate": 1.0}, r"`rate` must be a number in \[0, 1\), got 1.0"),
    ("mc_dropout_mlp", {"length_scale": 0.0}, r"`length_scale` must be a finite number > 0"),
    ("flipout_mlp", {"hidden_units": []}, r"`hidden_units` must hold at least one int, "
                                          r"got \(\)"),
    ("flipout_mlp", {"hidden_units": [-1]}, r"`hidden_units\[0\]` must be a positive int, got -1"),
    ("bbb_mlp", {"hidden_units": 50}, r"`hidden_units` must be a sequence of positive ints, "
                                      r"got 50"),
    ("node_bnn", {"hidden_units": [16, 2.5]}, r"`hidden_units\[1\]` must be a positive int, "
                                              r"got 2.5"),
    ("flipout_lenet", {"input_shape": (8, 8, 1), "task": "classification", "num_classes": 10,
                       "filters": ()}, r"`filters` must hold at least one int"),
    ("flipout_mlp", {"decay_steps": 0}, r"`decay_steps` must be a positive int, got 0"),
    ("flipout_mlp", {"dropout": 0.1}, r"Model 'flipout_mlp' has no argument 'dropout'; its "
                                      r"arguments: \['decay_steps', 'hidden_units', "),
    ("flipout_mlp", {"rate": 0.1}, r"Model 'flipout_mlp' has no argument 'rate'"),
    ("flipout_mlp", {"heteroscedastic": True}, r"has no argument 'heteroscedastic'"),
    ("node_bnn", {"num_components": 0}, r"`num_components` must be a positive int, got 0"),
    ("node_bnn", {"prior_stddev": -1.0}, r"`prior_stddev` must be a finite number > 0"),
    ("bayesian_transformer", {"input_shape": (4,), "num_heads": 3},
     r"`width` \(16\) must be a multiple of `num_heads` \(3\)"),
    ("bayesian_transformer", {"input_shape": (4,), "path": "exact"},
     r"`path` must be one of \['mc', 'moments'\], got 'exact'"),
    ("bbb_mlp", {"prior": "gauss"}, r"Unknown `prior` 'gauss'"),
]


@pytest.mark.parametrize("name, kwargs, pattern", BAD_BUILDS,
                         ids=[f"{b[0]}-{'-'.join(b[1])}" for b in BAD_BUILDS])
def test_bad_build_arguments(name, kwargs, pattern):
    kwargs = {"input_shape": (3,), "num_train": 10, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        zoo.build_model(name, **kwargs)


# -- zoo.run.datasets.load -----------------------------------------------------------


@pytest.mark.parametrize(
    "dataset, pattern",
    [
        ("concret", rf"Unknown dataset 'concret': not a built-in name {BUILTIN}.*Did you mean "
                    r"'concrete'\?"),
        ("mnist", rf"Unknown dataset 'mnist': not a built-in name {BUILTIN}"),
        (None, rf"`dataset` must be a built-in name {BUILTIN} or a path, got None"),
        ("", r"`dataset` must be a built-in name .* or a path, got ''"),
        (3, r"`dataset` must be a built-in name .* or a path, got 3"),
    ],
)
def test_unknown_dataset_lists_the_builtin_names(dataset, pattern):
    with pytest.raises(ValueError, match=pattern):
        datasets.load(dataset)


def test_missing_paths_are_named(tmp_path):
    for missing in (tmp_path / "uci" / "energy", tmp_path / "series.csv"):
        with pytest.raises(ValueError, match=re.escape(f"Dataset path '{missing}' does not "
                                                       "exist")):
            datasets.load(str(missing))


def test_a_file_that_is_not_a_series(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("1 2\n3 4\n")
    with pytest.raises(ValueError, match=re.escape(f"Dataset file '{path}' is not a .csv "
                                                   "time series")):
        datasets.load(str(path))


@pytest.mark.parametrize(
    "split, seed, pattern",
    [
        (-1, 0, r"`split` must be a non-negative int, got -1"),
        (1.5, 0, r"`split` must be a non-negative int, got 1.5"),
        (True, 0, r"`split` must be a non-negative int, got True"),
        (0, -2, r"`seed` must be a non-negative int, got -2"),
        (0, 1.5, r"`seed` must be a non-negative int, got 1.5"),
        (20, 0, r"`split` 20 is out of range: yacht has 20 splits \(0-19\)"),
    ],
)
def test_bad_split_and_seed(split, seed, pattern):
    with pytest.raises(ValueError, match=pattern):
        datasets.load("yacht", split=split, seed=seed)


def test_series_has_one_split():
    with pytest.raises(ValueError, match=r"`split` must be 0 for a time series \(sunspots"):
        datasets.load("sunspots", split=1)


def _series(tmp_path, rows):
    path = tmp_path / "series.csv"
    path.write_text("month,value\n" + "".join(f"m{i},{value}\n" for i, value in
                                              enumerate(rows)))
    return path


@pytest.mark.parametrize(
    "rows, problem",
    [
        ([1.0] * 10 + ["nan"] + [1.0] * 300, r", line 12: 'nan' is not a finite number"),
        ([1.0] * 5 + ["inf"], r", line 7: 'inf' is not a finite number"),
        ([1.0, "twelve"], r", line 3: 'twelve' is not a number"),
        ([], r": the file holds no data rows"),
        ([1.0] * 30, r": the series has 30 values; 24-step windows with the last 240 targets "
                     r"held out need at least 266"),
    ],
    ids=["nan", "inf", "text", "empty", "too_short"],
)
def test_bad_series_files_name_file_and_line(tmp_path, rows, problem):
    path = _series(tmp_path, rows)
    with pytest.raises(ValueError, match=re.escape(str(path)) + problem):
        datasets.load(str(path))


def test_bad_uci_directory_names_file_and_line(tmp_path):
    (tmp_path / "data.txt").write_text("1 2 3\n4 5 6\n7 8\n")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'data.txt'}, line 3: "
                                                   "expected 3 columns, found 2")):
        datasets.load(str(tmp_path))


def test_uci_directory_split_out_of_range(tmp_path):
    (tmp_path / "data.txt").write_text("".join(f"{i} {i * i}\n" for i in range(12)))
    (tmp_path / "index_train_0.txt").write_text("0\n1\n2\n")
    (tmp_path / "index_test_0.txt").write_text("3\n")
    with pytest.raises(ValueError, match=r"`split` 1 is out of range: .* has 1 splits \(0-0\)"):
        datasets.load(str(tmp_path), split=1)
