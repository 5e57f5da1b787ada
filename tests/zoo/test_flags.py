"""The shared zoo flags: defaults and rejection of bad values."""

import argparse

import pytest

from tfp_bnn.predict import engine
from zoo import flags
from zoo.flags import add_run_flags
from zoo.flags import check_run_flags


def _parser():
    parser = argparse.ArgumentParser(prog="test")
    add_run_flags(parser, 7, 11, "epochs", "seed", "samples")
    return parser


def test_defaults():
    args = _parser().parse_args([])
    assert (args.epochs, args.seed, args.samples) == (7, 0, 11)


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "--epochs must be a positive int, got 0"),
    (["--samples", "-1"], "--samples must be a positive int, got -1"),
    (["--seed", "-3"], "--seed must be a non-negative int, got -3"),
])
def test_bad_values_exit_with_a_message(capsys, argv, message):
    parser = _parser()
    with pytest.raises(SystemExit) as exit_info:
        check_run_flags(parser, parser.parse_args(argv))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_cli_limit_is_the_library_limit():
    assert flags.MAX_SAMPLES == engine.MAX_NUM_SAMPLES


@pytest.mark.parametrize("text", ["0", "-3", str(10**6 + 1), str(2**40), str(2**63), "many"])
def test_sample_count_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        flags.sample_count(text)


def test_sample_count_accepts_the_limit():
    assert flags.sample_count(str(10**6)) == 10**6
