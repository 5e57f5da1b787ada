"""The KL term of a variational layer: which estimator, and how it enters the loss.

    KL(q || p) summed over the weights, closed form where TFP has one
    (kl_estimator "analytic", or "auto" when the prior has it), else the
    one-sample Monte Carlo estimate log q(w) - log p(w) (Blundell et al. 2015).

kl_weight * KL enters the loss through the layer's `KLRegularizer`, once per
step however often the layer is called, and is logged in its `kl` tracker
(see `_kl_tracking`). The Monte Carlo estimate there is taken at a fresh
posterior draw: as unbiased as one at the forward pass's draw.
"""

from keras import ops

from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers._stochastic import StochasticLayer
from tfp_bnn.layers._tracing import flag

KL_ESTIMATORS = ("auto", "analytic", "mc")


def check_kl_estimator(kl_estimator, prior):
    """`kl_estimator` if it is known and `prior` supports it, else ValueError."""
    _validation.one_of("kl_estimator", kl_estimator, KL_ESTIMATORS)
    if kl_estimator == "analytic" and not prior.has_analytic_kl:
        raise ValueError(
            f"`kl_estimator`='analytic' needs a prior with a closed-form KL; "
            f"{prior!r} has none. Use kl_estimator='mc' or 'auto'."
        )
    return kl_estimator


class VariationalKL(StochasticLayer):
    """Mixin of `BayesianLayer`: the posterior draws of a call and their KL.

    Expects `posterior`, `prior`, `kl_estimator`, `kernel_params`,
    `bias_params` and the built priors set by `BayesianLayer`.
    """

    def kl_divergence(self):
        """KL(q || p) of this layer's weights, unweighted, in nats.

        Exact when the estimator is analytic; otherwise a one-sample Monte
        Carlo estimate.
        """
        # Float32 variables even when called from a mixed-precision model's
        # call (the moment path), whose autocast scope would read them as
        # float16 and give a float16 KL.
        with float32_variables():
            # The closed form needs no noise: leave the seed generator untouched.
            seeds = (None, None) if self._use_analytic_kl() else self._call_seeds()
            kl = self._kl_of(self._draw(self.kernel_params, seeds[0], with_noise=False))
            if self.bias_params is not None:
                kl = kl + self._kl_of(self._draw(self.bias_params, seeds[1],
                                                 with_noise=False))
            return kl

    def kl_penalty(self, batch_size):
        """kl_weight * KL(q || p) as this layer's `KLRegularizer` adds it, for a
        model that uses the layer's posterior without calling it (e.g. moment
        propagation, `tfp_bnn.moments`). Logs it like the regularizer
        (`KLScheduler`'s `kl` and `data_loss`); the caller adds the returned
        term with `add_loss`, and the layer's regularizer then adds nothing,
        so the KL counts once.
        """
        self._kl_from_caller = True
        return self._deferred_kl_penalty(batch_size)

    def _call_seeds(self):
        """Seeds for this call's draws: kernel, bias, and two for the layer's own use."""
        return noise.call_seeds(self.seed_generator, 4)

    def _draw(self, params, seed, with_noise=True):
        """The posterior's draw for this call, with the closed-form KL if used."""
        weight_prior = self._prior_for(params)
        prior = weight_prior if self._use_analytic_kl() else None
        draw = self.posterior.draw(
            params, seed, self.compute_dtype, prior, with_noise=with_noise or prior is None
        )
        return draw._replace(prior=weight_prior)

    def _prior_for(self, params):
        """The prior of the weights `params` parameterize (see `Prior.build`)."""
        built = self._bias_prior_built if params is self.bias_params else self._kernel_prior_built
        return self.prior if built is None else built

    def _use_analytic_kl(self):
        if self.kl_estimator == "analytic":
            return True
        return self.kl_estimator == "auto" and self.prior.has_analytic_kl

    def _kl_of(self, draw):
        """KL(q || p) summed over elements: closed form, or MC at mean + perturbation.

        mean + perturbation is a posterior sample (a fresh one when called
        from `kl_divergence`), so log q - log p there is an unbiased estimate
        (Blundell et al. 2015, sec. 3.1).
        """
        if draw.kl is not None:
            return draw.kl
        mean = ops.cast(self.posterior.mean(draw.prepared), "float32")
        sample = mean + ops.cast(draw.perturbation, "float32")
        p = (draw.prior or self.prior).element_distribution("float32")
        if draw.log_prob is not None:  # log q of the sample, computed by the posterior
            return draw.log_prob - ops.sum(p.log_prob(sample))
        log_q = self.posterior.distribution(draw.prepared).log_prob(sample)
        log_p = p.log_prob(sample)
        if log_q.shape == log_p.shape:  # element-wise q: difference first, less cancellation
            return ops.sum(log_q - log_p)
        return ops.sum(log_q) - ops.sum(log_p)  # q joint over the weights

    def _add_kl(self, inputs, training, kernel_draw, *other_draws):
        """Makes sure the layer's KL enters the loss: once per step, whatever the calls.

        The term itself is the layer's `KLRegularizer` (`_kl_tracking`),
        computed from the weights when Keras reads the losses, outside any
        loop; the draws of this call do not enter it.
        """
        del kernel_draw, other_draws
        if flag("skip_kl"):
            return
        self._warn_if_kl_weight_unset(training)
        self._claim_kl(inputs.shape[0] if len(inputs.shape) else None)

    def _tracked_penalty(self, kl, batch_size):
        """kl_weight * kl, logged in this layer's `kl` tracker for `batch_size` rows."""
        penalty = self.kl_weight * kl
        self._record_kl(penalty, batch_size)
        return penalty

    def _deferred_kl_penalty(self, rows):
        """kl_weight * KL from the weights alone, logged for `rows` rows."""
        with float32_variables():  # kl_weight in float32 too
            return self._tracked_penalty(self.kl_divergence(), rows)
