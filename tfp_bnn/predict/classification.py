"""Monte Carlo predictive distribution of a classifier, and its uncertainties.

With T weight samples giving class probabilities p_t:

    predictive probabilities  p     = (1/T) sum_t p_t
    total uncertainty         H[p]  = -sum_k p_k log p_k       (predictive entropy)
    aleatoric                 E[H]  = (1/T) sum_t H[p_t]       (expected entropy)
    epistemic                 MI    = H[p] - E[H]              (mutual information
                                                              of label and weights)

(Houlsby et al. 2011; Depeweg et al. 2018). Entropies are in nats, computed
in float64 from log-probabilities so that |logits| ~ 1e3 stay finite.
"""

import keras
import numpy as np

from tfp_bnn import _predictive
from tfp_bnn import _validation as check
from tfp_bnn import metrics
from tfp_bnn.predict import _chunk_math
from tfp_bnn.predict import engine
from tfp_bnn.predict import limits

OUTPUTS = ("auto",) + _predictive.CLASSIFICATION_OUTPUTS
# The kinds of output arrays `log_probabilities` reads.
VALUE_OUTPUTS = ("logits", "probabilities", "log_probabilities")
SCORES = ("predictive_entropy", "expected_entropy", "mutual_information",
          "one_minus_max_probability")


def _look_like_probabilities(values):
    """Every row in [0, 1] and summing to 1 within float32 rounding (~1e-6 * K)."""
    tolerance = 1e-5 * values.shape[-1]
    return bool(np.all((values >= 0) & (values <= 1))
                and np.all(np.abs(values.sum(axis=-1) - 1.0) <= tolerance))


def log_probabilities(outputs, output):
    """float64 log-probabilities [..., K] from model outputs of kind `output`.

    Probabilities must lie in [0, 1] and sum to 1 per row within 1e-3: float32
    softmax rows sum to 1 within ~1e-6 * K, so a larger gap means the model's
    outputs are not probabilities (e.g. logits passed as output="probabilities").
    """
    values = np.asarray(outputs, dtype=np.float64)
    if values.shape[-1] < 2:
        raise ValueError(f"A classifier needs >= 2 classes on the last axis, got shape "
                         f"{values.shape}.")
    # log 0 = -inf is a valid log-probability; NaN and +inf never are.
    bad = np.isnan(values) | (values == np.inf)
    if output != "log_probabilities":
        bad |= np.isinf(values)
    if np.any(bad):
        raise ValueError(f"The model's {output} contain NaN or infinite values.")
    if output == "logits":
        if _look_like_probabilities(values):
            raise ValueError(
                "output='logits' but every row of the model's outputs lies in [0, 1] and sums "
                "to 1: these are probabilities (a softmax output?); pass "
                "output='probabilities' or output='auto'.")
        return _chunk_math.class_log_probs(values, output)
    if output == "log_probabilities":
        totals = np.exp(values).sum(axis=-1)
    else:
        if np.any(values < 0) or np.any(values > 1):
            raise ValueError("output='probabilities' but the model's outputs leave [0, 1].")
        totals = values.sum(axis=-1)
    worst = float(np.max(np.abs(totals - 1.0)))
    if worst > 1e-3:
        raise ValueError(
            f"output={output!r} but the model's outputs do not sum to 1 over classes "
            f"(off by up to {worst:.3g}); use output='logits' for unnormalised scores."
        )
    return _chunk_math.class_log_probs(values, output)


class ClassificationPrediction:
    """Predictive class probabilities with their uncertainty decomposition.

    Build it with `tfp_bnn.predict.classification(model, x, ...)`, or from
    sampled probabilities with `ClassificationPrediction.from_samples(p)`.

    Args:
        probs: [N, K] predictive probabilities (mean over samples).
        expected_entropy: [N] mean entropy of the sampled distributions.
        num_samples: T.
        sample_probs: optional [T, N, K] sampled probabilities.

    Attributes:
        probs: [N, K] predictive probabilities.
        predictive_entropy: [N] entropy of `probs`, the total uncertainty.
        expected_entropy: [N] mean entropy of the samples, the aleatoric part.
        mutual_information: [N] `predictive_entropy - expected_entropy`, the
            epistemic part.

    Example:
    >>> samples = np.array([[[0.9, 0.1]], [[0.5, 0.5]]])   # T = 2 samples, N = 1, K = 2
    >>> pred = ClassificationPrediction.from_samples(samples)
    >>> pred.probs
    array([[0.7, 0.3]])
    >>> pred.mutual_information.round(4)   # H[mean p] - mean H[p_t]
    array([0.1017])
    """

    def __init__(self, probs, expected_entropy, num_samples, sample_probs=None):
        self.probs = np.asarray(probs, dtype=np.float64)
        self.expected_entropy = np.asarray(expected_entropy, dtype=np.float64)
        self.num_samples = int(num_samples)
        self.sample_probs = sample_probs
        summaries = self.summaries()
        self.predictive_entropy = summaries["predictive_entropy"]
        self.mutual_information = summaries["mutual_information"]

    def summaries(self):
        """The `CLASSIFICATION_SUMMARIES` dict ("probabilities", ...) `export_predictive` serves.

        Returns:
            dict of float64 arrays: "probabilities" [N, K], "predictive_entropy",
            "expected_entropy" and "mutual_information" [N].
        """
        return _chunk_math.classification_summaries(self.probs, self.expected_entropy)

    @classmethod
    def from_samples(cls, sample_probs, output="probabilities"):
        """From T sampled outputs [T, N, K] of kind `output` (see `classification`).

        Args:
            sample_probs: sampled outputs [T, N, K].
            output: their kind: "probabilities", "logits" or "log_probabilities".

        Returns:
            A `ClassificationPrediction` that keeps the sampled probabilities.
        """
        check.one_of("output", output, VALUE_OUTPUTS)
        sample_probs = np.asarray(sample_probs)
        if sample_probs.ndim != 3 or 0 in sample_probs.shape:
            raise ValueError(
                "Sampled outputs must have shape [T, N, K] with T, N >= 1 and K >= 2, got "
                f"shape {sample_probs.shape}."
            )
        log_p = log_probabilities(sample_probs, output)
        num_samples = sample_probs.shape[0]
        probs_sum, entropy_sum = _chunk_math.class_sums(log_p)
        return cls(np.asarray(probs_sum) / num_samples, np.asarray(entropy_sum) / num_samples,
                   num_samples, np.exp(log_p))

    def nll(self, labels):
        """Mean negative log predictive probability of the labels (nats).

        Args:
            labels: integer class ids [N].

        Returns:
            A float.
        """
        return metrics.negative_log_likelihood(labels, self.probs)

    def accuracy(self, labels):
        return metrics.accuracy(labels, self.probs)

    def brier(self, labels):
        return metrics.brier_score(labels, self.probs)

    def ece(self, labels, num_bins=15):
        """Expected calibration error with `num_bins` equal-width bins.

        Args:
            labels: integer class ids [N].
            num_bins: number of confidence bins, an int >= 1.

        Returns:
            A float in [0, 1].
        """
        return metrics.expected_calibration_error(labels, self.probs, num_bins=num_bins)

    def score(self, name="predictive_entropy"):
        """An uncertainty score per point, higher = more uncertain.

        Args:
            name: "predictive_entropy" (default), "expected_entropy",
                "mutual_information" or "one_minus_max_probability".

        Returns:
            A float64 array [N].
        """
        check.one_of("name", name, SCORES)
        if name == "one_minus_max_probability":
            return 1.0 - self.probs.max(axis=-1)
        return getattr(self, name)

    def ood_auroc(self, out_of_distribution, score="predictive_entropy"):
        """AUROC of telling `out_of_distribution` (a prediction) from this one by `score`.

        Args:
            out_of_distribution: the `ClassificationPrediction` of the OOD inputs.
            score: the score's name, as in `score`.

        Returns:
            A float in [0, 1]; 0.5 means no separation.
        """
        if not isinstance(out_of_distribution, ClassificationPrediction):
            raise ValueError("`out_of_distribution` must be a ClassificationPrediction (from "
                             "tfp_bnn.predict.classification on the OOD inputs), got "
                             f"{type(out_of_distribution).__name__}.")
        return metrics.auroc(self.score(score), out_of_distribution.score(score))


def _normalises(layer):
    """True if `layer` ends in a softmax (its outputs are probabilities)."""
    if isinstance(layer, keras.layers.Softmax):
        return True
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", None)
    return name in ("softmax", "log_softmax") and name


def resolve_output(model, output):
    """The kind of a classifier's outputs: "auto" resolved, a contradiction refused."""
    check.one_of("output", output, OUTPUTS)
    if output == "distribution" or (output == "auto" and engine.has_distribution_head(model)):
        return "distribution"
    ending = _normalises(engine.output_layer(model))
    kind = {"softmax": "probabilities", "log_softmax": "log_probabilities"}.get(ending)
    if output == "auto":
        return kind or "logits"
    if kind and output != kind:
        raise ValueError(
            f"output={output!r} but the model's last layer applies {ending}, so its outputs "
            f"are {kind}: pass output={kind!r} (or output='auto').")
    return output


def classification(model, x, num_samples=100, output="auto", keep_samples=False,
                   batch_size=None, samples_per_call=None, max_rows=engine.DEFAULT_MAX_ROWS,
                   jit_compile=False):
    """Monte Carlo predictive distribution of a classifier.

    Summaries are accumulated chunk by chunk: memory holds [N, K] sums, not
    the T * N * K samples (unless `keep_samples=True`).

    Args:
        model: a built Keras model with tfp_bnn stochastic layers whose
            single output has the K classes on its last axis.
        x: inputs of N examples (array, tensor, or list/dict of them).
        num_samples: T >= 1 weight samples.
        output: what the model outputs: "auto" (default: "distribution"
            for a `tfp_bnn.layers.Categorical` / `OneHotCategorical` /
            `IndependentBernoulli` head, "probabilities" after a softmax,
            "log_probabilities" after a log-softmax, else "logits"),
            "logits", "probabilities" (rows sum to 1), "log_probabilities"
            (e.g. `tfp_bnn.layers.HeteroscedasticClassification`) or
            "distribution". An explicit kind that contradicts the model's
            last activation is refused, and so are "logits" that are
            probabilities in every row (they would give a wrong NLL).
        keep_samples: also keep the [T, N, K] sampled probabilities.
        batch_size: inputs per traced call (default min(N, 1024)).
        samples_per_call: weight samples per traced call (default: as many
            as keep samples_per_call * batch_size <= max_rows).
        max_rows: memory bound in tiled rows per call, used for the
            default samples_per_call.
        jit_compile: compile the traced calls with XLA (on JAX they always are).

    Returns:
        `ClassificationPrediction`.

    Example:
    >>> x, y = np.random.rand(6, 4).astype("float32"), np.array([0, 1, 2, 0, 1, 2])
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
    >>> pred = tfp_bnn.predict.classification(model, x, num_samples=100)   # logits
    >>> pred.probs.shape, pred.mutual_information.shape
    ((6, 3), (6,))
    >>> scores = pred.accuracy(y), pred.ece(y), pred.nll(y)
    """
    plan = engine.prepare(model, x, num_samples, batch_size, samples_per_call, max_rows)
    output = resolve_output(model, output)
    num_samples, count = plan.num_samples, plan.count
    if keep_samples:
        limits.check_results(model, num_samples, count, "The kept samples")
    probs_sum = entropy_sum = samples = None
    for chunk in engine.chunks(model, plan, jit_compile=jit_compile,
                               distributions=output == "distribution", values_of=repr(output)):
        if output == "distribution":
            log_p = _chunk_math.distribution_class_log_probs(chunk.outputs, chunk.t1 - chunk.t0)
        elif not isinstance(chunk.outputs, np.ndarray):
            raise ValueError("classification() needs a model with a single output tensor.")
        else:
            log_p = log_probabilities(chunk.outputs, output)
        if probs_sum is None:
            classes = log_p.shape[2:]
            probs_sum, entropy_sum = np.zeros((count,) + classes), np.zeros((count,) + classes[:-1])
            if keep_samples:
                limits.check_storage((num_samples, count) + classes, np.float64,
                                     "The kept samples")
                samples = np.empty((num_samples, count) + classes)
        chunk_probs, chunk_entropy = _chunk_math.class_sums(log_p)
        probs_sum[chunk.n0:chunk.n1] += chunk_probs
        entropy_sum[chunk.n0:chunk.n1] += chunk_entropy
        if keep_samples:
            samples[chunk.t0:chunk.t1, chunk.n0:chunk.n1] = np.exp(log_p)
    return ClassificationPrediction(probs_sum / num_samples, entropy_sum / num_samples,
                                    num_samples, samples)
