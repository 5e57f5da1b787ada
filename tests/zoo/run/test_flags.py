"""The shared zoo flags: defaults and rejection of bad values."""

import argparse

import pytest

from tfp_bnn.predict import limits
from zoo.run import flags
from zoo.run.flags import check_run_flags


def _parser():
    return flags.run_parser("test", "a command", 7, 11, "epochs", "seed", "samples")


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
    assert flags.MAX_SAMPLES == limits.MAX_NUM_SAMPLES


@pytest.mark.parametrize("text", ["0", "-3", str(10**6 + 1), str(2**40), str(2**63), "many"])
def test_sample_count_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        flags.sample_count(text)


def test_sample_count_accepts_the_limit():
    assert flags.sample_count(str(10**6)) == 10**6


@pytest.mark.parametrize("parse, limit", [
    (flags.epoch_count, flags.MAX_EPOCHS), (flags.batch_size, flags.MAX_BATCH_SIZE),
    (flags.thread_count, flags.MAX_THREADS), (flags.split_index, flags.MAX_SPLIT),
    (flags.seed, 2**32 - 1 - flags.MAX_SPLIT), (flags.seconds, flags.MAX_CHECKPOINT_SECONDS),
])
def test_each_limit_is_inclusive(parse, limit):
    assert parse(str(limit)) == limit
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        parse(str(limit + 1))


def test_the_largest_seed_is_one_numpy_takes():
    import numpy as np  # noqa: PLC0415

    np.random.default_rng(flags.MAX_SEED + flags.MAX_SPLIT)
    np.random.seed(flags.MAX_SEED + flags.MAX_SPLIT)
    with pytest.raises(ValueError):
        np.random.seed(flags.MAX_SEED + flags.MAX_SPLIT + 1)


def test_overrides_parse_json_or_a_plain_string():
    assert flags.parse_override("hidden_units=[100, 50]") == ("hidden_units", (100, 50))
    assert flags.parse_override("posterior=gaussian") == ("posterior", "gaussian")
    assert flags.parse_override("hidden_units=[[[[8]]]]") == ("hidden_units", ([[[8]]],))


def test_one_line_parser_prints_one_line(capsys):
    parser = flags.OneLineParser(prog="prog")
    parser.add_argument("--n", type=flags.epoch_count)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--n", "0"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("prog: error: argument --n: must be a positive int, "
                                       "got 0 (see prog --help)\n")


@pytest.mark.parametrize("module", ["covariate_shift", "node_bnn_tuning",
                                    "transformer_compare"])
def test_report_commands_refuse_an_existing_out_before_training(module, tmp_path, capsys):
    import importlib  # noqa: PLC0415

    out = tmp_path / "report.md"
    out.write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(f"zoo.experiments.{module}").main(["--epochs", "1",
                                                                   "--out", str(out)])
    assert exit_info.value.code == 2
    assert "already exists" in capsys.readouterr().err
    assert out.read_text() == "mine"


def test_the_flags_read_numbers_as_the_data_files_do():
    from tfp_bnn.data import _text_files  # noqa: PLC0415

    assert flags.NUMBER.pattern == _text_files._NUMBER.pattern
    for text in ["1", "-2", ".5", "+3.", "1e-3", "1E+05", "1_0", "\uff11\uff10", " 1", "0x1A",
                 "1,5", "nan", "inf", ""]:
        assert bool(flags.NUMBER.fullmatch(text)) == _text_files.is_number(text), text


@pytest.mark.parametrize("parse", [flags.budget_minutes, flags.seconds, flags.epoch_count,
                                   flags.seed, flags.plain_int])
@pytest.mark.parametrize("text", ["1_0", "\uff11\uff10", " 10", "10 ", "0x1A"])
def test_number_flags_refuse_what_a_data_file_refuses(parse, text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        parse(text)


@pytest.mark.parametrize("argv, joined", [
    (["--budget-minutes", "-inf"], ["--budget-minutes=-inf"]),
    (["--checkpoint-seconds", "-1e3", "--quiet"], ["--checkpoint-seconds=-1e3", "--quiet"]),
    (["--seed", "-NaN"], ["--seed=-NaN"]),
    (["--quiet", "--epochs", "3"], ["--quiet", "--epochs", "3"]),
    (["--out=x", "-5"], ["--out=x", "-5"]),
    (["-h"], ["-h"]),
])
def test_a_negative_value_is_attached_to_its_flag(argv, joined):
    assert flags.attach_negative_values(argv) == joined
