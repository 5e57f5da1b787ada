"""tests/ mirrors tfp_bnn/ and zoo/ one to one (STYLE, "Layout" and "Tests").

Rule: the module `tfp_bnn/<dirs>/<name>.py` is tested in
`tests/<dirs>/test_<name>.py`, and `zoo/<dirs>/<name>.py` in
`tests/zoo/<dirs>/test_<name>.py`. A private module keeps its underscore
(`_validation.py` -> `test__validation.py`), so every test file names exactly
one module. A file named with a suffix (`test_saving_hostile.py`,
`test_export_bad_input.py`) belongs to the module its longest prefix names.

Private modules may instead be covered by the tests of the public modules that
use them: they are splits made to keep modules small (`predict/_inputs.py`,
`layers/variational/_dense_base.py`), their contract is the public one, and tests pinned to
their internals would have to move at every internal refactor. Each such module
is listed in `COVERED_THROUGH` with the test files that reach it, so a module
without tests cannot hide. Public modules have a test file of their own, except
those in `NO_TEST_FILE`, each with its reason.

Cross-cutting suites (one property checked across many modules) live in
tests/integration/ and mirror nothing. tests/colab and tests/benchmarks mirror
the top-level colab/ and benchmarks/ folders, tests/docs the documentation site
in .ci/docs (its hooks, and the strict build of the whole site).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PACKAGES = ("tfp_bnn", "zoo")
FREE_FORM = ("integration", "colab", "benchmarks", "docs")

# Private module -> the test files (relative to tests/) that exercise it
# through the public modules that use it.
COVERED_THROUGH = {
    "tfp_bnn/calibration/_logit_calibration.py": [
        "calibration/test_temperature_scaling.py", "calibration/test_vector_scaling.py",
        "calibration/test_matrix_scaling.py", "calibration/test_calibrated.py"],
    "tfp_bnn/calibration/_one_vs_rest.py": ["calibration/test_histogram_binning.py",
                                            "calibration/test_isotonic_calibration.py"],
    "zoo/run/_auto_trial.py": ["zoo/run/test_auto.py"],
    "tfp_bnn/_data_units.py": ["test_export_preprocessing.py", "zoo/run/test_outputs.py"],
    "tfp_bnn/_export_files.py": ["test_export.py", "test_export_bad_input.py"],
    "tfp_bnn/_keras_archive.py": ["test_saving.py", "test_saving_hostile.py"],
    "tfp_bnn/_memory.py": ["predict/test_limits.py", "test_saving_hostile.py"],
    "tfp_bnn/data/_text_files.py": ["data/test_uci.py", "data/test_uci_layout.py",
                                    "integration/test_data_hostile.py"],
    "tfp_bnn/_predictive.py": ["predict/test_classification.py",
                               "predict/test_regression_prediction.py",
                               "test_export_distribution.py"],
    "tfp_bnn/flows/_common.py": ["flows/test_planar.py", "flows/test_sylvester.py"],
    "tfp_bnn/layers/attention/_composite.py": ["layers/attention/test_bayesian_multi_head_attention.py",
                                     "layers/attention/test_bayesian_transformer_block.py"],
    "tfp_bnn/layers/variational/_estimators.py": [
        "layers/variational/test_dense_reparameterization.py",
        "layers/variational/test_dense_flipout.py", "layers/variational/test_conv2d_flipout.py"],
    "tfp_bnn/layers/variational/_dense_base.py": ["layers/variational/test_dense_reparameterization.py",
                                      "layers/variational/test_dense_flipout.py"],
    "tfp_bnn/layers/_mixed_precision.py": ["integration/test_layer_mixed_precision.py"],
    "tfp_bnn/layers/node/_node_posterior.py": ["layers/node/test_node_dense.py",
                                          "layers/node/test_node_conv2d.py"],
    "tfp_bnn/layers/recurrent/_recurrent_cell.py": ["layers/recurrent/test_lstm_cell_reparameterization.py",
                                         "layers/recurrent/test_gru_cell_reparameterization.py",
                                         "layers/recurrent/test_lstm_cell_flipout.py",
                                         "layers/recurrent/test_gru_cell_flipout.py"],
    "tfp_bnn/layers/recurrent/_recurrent_gates.py": ["layers/recurrent/test_lstm_cell_reparameterization.py",
                                          "layers/recurrent/test_gru_cell_reparameterization.py",
                                          "layers/recurrent/test_lstm_cell_flipout.py",
                                          "layers/recurrent/test_gru_cell_flipout.py"],
    "tfp_bnn/layers/heads/_projection_head.py": ["layers/heads/test_heteroscedastic_regression.py",
                                           "layers/heads/test_heteroscedastic_classification.py"],
    "tfp_bnn/layers/_shapes.py": ["layers/variational/test_dense_reparameterization.py",
                                  "layers/variational/test__conv_base.py"],
    "tfp_bnn/layers/_stochastic.py": ["layers/variational/test_base.py", "layers/node/test_node_dense.py"],
    "tfp_bnn/layers/_tracing.py": ["layers/node/test_node_dense.py", "predict/test_engine.py"],
    "tfp_bnn/layers/variational/_weight_samples.py": ["predict/test_engine.py",
                                          "integration/test_xla_and_seeds.py"],
    "tfp_bnn/predict/_inputs.py": ["integration/test_predict_bad_input.py"],
    "tfp_bnn/testing/_common.py": ["integration/test_custom_posterior_prior.py"],
}

# Public modules without a test file of their own: what tests them instead.
NO_TEST_FILE = {
    "tfp_bnn/config_objects.py": "the base of every prior, posterior and schedule: their "
                                 "config round trips and equality (test_priors.py, posteriors/)",
    "tfp_bnn/flows/batch_norm.py": "integration/test_bijector_contract.py (log-det, round trip, "
                                   "extremes); its statistics in flows/test_normalizing_flow.py",
    "tfp_bnn/layers/node/node_base.py": "NodeLayer, the base of the node layers: "
                                   "layers/node/test_node_dense.py, layers/node/test_node_conv2d.py",
    "tfp_bnn/posteriors/base.py": "the Posterior contract: posteriors/test_mean_field.py and "
                                  "integration/test_custom_posterior_prior.py",
    "tfp_bnn/predict/sampling.py": "`sample` is the front end of the engine: "
                                   "predict/test_engine.py",
    "tfp_bnn/testing/composite_layer_test.py": "a test harness, run by the composite layers' tests",
    "tfp_bnn/testing/layer_test.py": "a test harness, run by every Bayesian layer's test",
    "tfp_bnn/testing/moments_reference.py": "the sampling reference of the moments/ tests",
    "zoo/experiments/uci_benchmark_args.py": "the parser of `zoo benchmark uci`: "
                                             "zoo/test_cli_bad_input.py, zoo/test_cli_hostile.py",
    "zoo/models/limits.py": "the size limits of every builder: zoo/test_cli_hostile.py, "
                            "integration/test_zoo_bad_input_api.py",
    "zoo/run/fingerprint.py": "the resume fingerprint: zoo/run/test_run_dir.py (changed "
                              "data, threads or --set refused on resume), "
                              "zoo/run/test_runner_interruption.py",
}


def _product_modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name not in ("__init__.py", "__main__.py"):
                yield path.relative_to(ROOT)


def _test_dir(module: Path) -> Path:
    parts = module.parent.parts
    return Path(*parts[1:]) if parts[0] == "tfp_bnn" else Path(*parts)


def _expected_test(module: Path) -> str:
    return (_test_dir(module) / f"test_{module.stem}.py").as_posix()


def _test_files():
    for path in sorted(TESTS.rglob("test_*.py")):
        relative = path.relative_to(TESTS)
        if relative.parts[0] not in FREE_FORM:
            yield relative


def _mirrored_module(test_file: Path, modules):
    """The module `test_file` tests, by longest matching name prefix."""
    name = test_file.stem[len("test_"):]
    candidates = [m for m in modules if _test_dir(m) == test_file.parent
                  and (name == m.stem or name.startswith(m.stem + "_"))]
    return max(candidates, key=lambda m: len(m.stem), default=None)


def test_every_module_has_its_test_file():
    missing = []
    for module in _product_modules():
        key = module.as_posix()
        if (TESTS / _expected_test(module)).exists():
            continue
        if key in COVERED_THROUGH or key in NO_TEST_FILE:
            continue
        missing.append(f"{key} -> tests/{_expected_test(module)}")
    assert not missing, "modules without a mirrored test file:\n" + "\n".join(missing)


def _orphans():
    modules = list(_product_modules())
    return [f.as_posix() for f in _test_files() if _mirrored_module(f, modules) is None]


def test_every_test_file_mirrors_a_module():
    orphans = _orphans()
    assert not orphans, "test files that mirror no module:\n" + "\n".join(orphans)


def test_allow_lists_are_current():
    modules = {m.as_posix() for m in _product_modules()}
    for module, covering in COVERED_THROUGH.items():
        assert module in modules, f"COVERED_THROUGH names a gone module {module}"
        assert Path(module).name.startswith("_"), f"{module} is public: test it"
        assert not (TESTS / _expected_test(Path(module))).exists(), (
            f"{module} has its own test file now: drop it from COVERED_THROUGH")
        assert covering, f"{module}: name the test files that cover it"
        for test_file in covering:
            assert (TESTS / test_file).exists(), f"{module}: no tests/{test_file}"
    for module in NO_TEST_FILE:
        assert module in modules, f"NO_TEST_FILE names a gone module {module}"
        assert not (TESTS / _expected_test(Path(module))).exists(), (
            f"{module} has a test file now: drop it from NO_TEST_FILE")


def test_benchmark_smoke_tests_name_a_benchmark_script():
    for path in sorted((TESTS / "benchmarks").glob("test_*_smoke.py")):
        script = path.stem[len("test_"):-len("_smoke")]
        assert (ROOT / "benchmarks" / f"{script}.py").exists(), path.name


def test_docs_tests_name_a_site_module():
    for path in sorted((TESTS / "docs").glob("test_*.py")):
        if path.name != "test_site.py":  # the build of the whole site
            assert (ROOT / ".ci" / "docs" / f"{path.stem[len('test_'):]}.py").exists(), path.name
