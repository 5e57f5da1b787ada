"""Dataset loaders, the small embedded datasets, and the benchmark protocol."""

from tfp_bnn.data import corruptions
from tfp_bnn.data.corruptions import CORRUPTIONS
from tfp_bnn.data.corruptions import corrupt
from tfp_bnn.data.digits import load_digits
from tfp_bnn.data.digits import stratified_split
from tfp_bnn.data.epochs import shuffled_epochs
from tfp_bnn.data.epochs import steps_per_epoch
from tfp_bnn.data.timeseries import forecasting_split
from tfp_bnn.data.timeseries import load_sunspots
from tfp_bnn.data.timeseries import make_windows
from tfp_bnn.data.timeseries import read_series_csv
from tfp_bnn.data.timeseries import sunspots_path
from tfp_bnn.data.uci import Standardizer
from tfp_bnn.data.uci import concrete_path
from tfp_bnn.data.uci import load_concrete
from tfp_bnn.data.uci import read_table
from tfp_bnn.data.uci import train_test_split
from tfp_bnn.data.uci_layout import UCIDataset

__all__ = [
    "CORRUPTIONS",
    "Standardizer",
    "UCIDataset",
    "concrete_path",
    "corrupt",
    "corruptions",
    "forecasting_split",
    "load_concrete",
    "load_digits",
    "load_sunspots",
    "make_windows",
    "read_series_csv",
    "read_table",
    "shuffled_epochs",
    "steps_per_epoch",
    "stratified_split",
    "sunspots_path",
    "train_test_split",
]
