"""Tests of the published UCI results table (`zoo.experiments.uci_published`)."""

from zoo.experiments import uci_benchmark as ub
from zoo.experiments import uci_published
from zoo.experiments.uci_published import PUBLISHED

FIVE = ("concrete", "energy", "kin8nm", "wine-quality-red", "yacht")
METHODS = ("VI", "PBP", "MC Dropout", "Deep Ensembles", "DVI")


def test_the_benchmark_names_datasets_and_prints_tables_with_this_module():
    # One copy of the dataset names and of the comparison table (tested in test_uci_benchmark).
    assert ub.canonical_name is uci_published.canonical_name
    assert ub.format_table is uci_published.format_table


def test_published_table_covers_the_five_datasets():
    assert set(PUBLISHED) == set(METHODS)
    for method, entry in PUBLISHED.items():
        assert isinstance(entry["citation"], str) and len(entry["citation"]) > 20, method
        for name in FIVE:
            scores = entry["results"][name]
            mean, error = scores["ll"]
            # kin8nm's target varies on a scale of ~0.26: its density exceeds 1.
            assert (mean > 0) == (name == "kin8nm"), (method, name, mean)
            assert error >= 0
            if scores["rmse"] is not None:
                assert scores["rmse"][0] > 0 and scores["rmse"][1] >= 0, (method, name)
    # Only DVI's paper leaves RMSE out.
    assert all(PUBLISHED["DVI"]["results"][n]["rmse"] is None for n in FIVE)
    assert all(PUBLISHED["PBP"]["results"][n]["rmse"] is not None for n in FIVE)


def test_deep_ensembles_nll_is_converted_to_ll():
    # The paper prints NLL 3.06 (concrete) and -1.20 (kin8nm).
    results = PUBLISHED["Deep Ensembles"]["results"]
    assert results["concrete"]["ll"] == (-3.06, 0.18)
    assert results["kin8nm"]["ll"] == (1.20, 0.02)
