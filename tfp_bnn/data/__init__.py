"""Dataset loaders, the small embedded datasets, and the benchmark protocol."""

from tfp_bnn.data.uci import Standardizer
from tfp_bnn.data.uci import concrete_path
from tfp_bnn.data.uci import load_concrete
from tfp_bnn.data.uci import read_table
from tfp_bnn.data.uci import train_test_split

__all__ = [
    "Standardizer",
    "concrete_path",
    "load_concrete",
    "read_table",
    "train_test_split",
]
