"""Statistics for evaluation results: the numbers rolltape reports and how sure it is of them.

Everything here depends on numpy and the standard library only (no scipy), so the
statistics can be imported in any process, including the light renderer workers.

What is computed, and by which convention:

* :func:`wilson_interval` -- the Wilson score interval for a success rate. Unlike the
  normal ("Wald") interval it stays inside ``[0, 1]`` and is not degenerate at 0/n or n/n,
  which are exactly the cases an evaluation of 10 episodes hits most often.
* :func:`iqm` -- the interquartile mean of rliable (Agarwal et al., 2021), computed like
  ``scipy.stats.trim_mean(values, 0.25)``: ``k = floor(0.25 * n)`` values are cut from each
  end of the sorted data and the rest are averaged.
* :func:`bootstrap_ci` -- a percentile bootstrap, vectorised and deterministic per seed.
* :func:`summarize` / :class:`Summary` -- one evaluation run. ``std`` is the population
  standard deviation (``ddof=0``), the ``np.std`` default that Stable-Baselines3's
  ``evaluate_policy`` and Gymnasium's wrappers report, so numbers line up with theirs.
* :func:`paired_improvement` -- policy versus baseline evaluated on the same seeds.
* :func:`aggregate` -- success rates per group of a benchmark suite plus a pooled total.
* :func:`success_percent` -- LeRobot's per-task numbers: counts, ``pc_success`` and its
  Wilson 95% interval in percent; :func:`mean_of_rates` -- the unweighted mean of task
  rates with a stratified bootstrap interval (each task counts equally).

Every result that leaves this module as a dict is JSON-safe: plain ``int``/``float``/
``list``/``None``, never numpy scalars, never NaN or infinity (those become ``None``), so
``json.dumps(result, allow_nan=False)`` always works.

The functions live by concern in :mod:`.intervals` (one evaluation), :mod:`.paired` (two
policies on the same seeds), :mod:`.aggregates` (a suite's tasks), :mod:`.sequential`
(confidence sequences, valid at every look: :func:`bernoulli_cs`, :func:`betting_cs`) and
:mod:`.recipes` (several training runs per recipe: :func:`recipe_summary`,
:func:`recipe_comparison`); all are named here.

May import: numpy only.
"""

from rolltape.stats.aggregates import (
    aggregate,
    aggregate_scores,
    normalize_scores,
    performance_profile,
    suite_probability_of_improvement,
)
from rolltape.stats.intervals import (
    Summary,
    bootstrap_ci,
    iqm,
    mean_of_rates,
    success_percent,
    summarize,
    wilson_interval,
)
from rolltape.stats.paired import (
    mcnemar_exact,
    minimum_detectable_difference,
    newcombe_paired_interval,
    paired_comparison,
    paired_improvement,
    probability_of_improvement,
)
from rolltape.stats.recipes import recipe_comparison, recipe_summary
from rolltape.stats.sequential import bernoulli_cs, betting_cs

__all__ = ["Summary", "aggregate", "aggregate_scores", "bernoulli_cs", "betting_cs", "bootstrap_ci", "iqm", "mcnemar_exact", "mean_of_rates", "minimum_detectable_difference", "newcombe_paired_interval", "normalize_scores", "paired_comparison", "paired_improvement", "performance_profile", "probability_of_improvement", "recipe_comparison", "recipe_summary", "success_percent", "suite_probability_of_improvement", "summarize", "wilson_interval"]
