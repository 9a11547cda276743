"""rolltape.stats.recipes: the two-level bootstrap of a recipe difference covers the true
difference at about its nominal rate where an episode-only bootstrap does not; recipe
aggregates and probability of improvement over runs equal rliable's on the same score
matrices."""

from __future__ import annotations

import numpy as np
import pytest

from rolltape.stats.recipes import ONE_RUN, recipe_comparison, recipe_summary


def _simulate_recipes(rng, runs, episodes, run_sd, episode_sd, seed_sd, gap):
    seeds = rng.normal(0.0, seed_sd, episodes)  # a hard seed is hard for both recipes
    a = gap + rng.normal(0, run_sd, (runs, 1)) + seeds + rng.normal(0, episode_sd,
                                                                   (runs, episodes))
    b = rng.normal(0, run_sd, (runs, 1)) + seeds + rng.normal(0, episode_sd, (runs, episodes))
    return a, b


def test_two_level_bootstrap_covers_the_true_recipe_difference_at_about_nominal_rate():
    rng = np.random.default_rng(2)
    trials, gap = 400, 1.0
    covered = episode_only = 0
    for k in range(trials):
        a, b = _simulate_recipes(rng, runs=10, episodes=10, run_sd=1.0, episode_sd=1.0,
                                 seed_sd=2.0, gap=gap)
        lo, hi = recipe_comparison({"t": a}, {"t": b}, n_resamples=300, seed=k)["difference"]["ci"]
        covered += lo <= gap <= hi
        # What one checkpoint's paired interval would say: episodes resampled, runs fixed.
        d = (a - b).mean(axis=0)
        boot = d[rng.integers(0, d.size, (300, d.size))].mean(axis=1)
        elo, ehi = np.quantile(boot, [0.025, 0.975])
        episode_only += elo <= gap <= ehi
    # 0.92 here (400 experiments: +-0.014): a percentile bootstrap over 10 runs is a little
    # short of 95%, as rliable's over runs is, since 10 runs show less spread than the
    # population they come from; what one checkpoint's interval says covers 0.39.
    assert 0.89 <= covered / trials <= 0.99, covered / trials
    assert episode_only / trials < 0.60, episode_only / trials


@pytest.fixture(scope="module")
def score_matrices():
    rng = np.random.default_rng(3)
    # 5 runs x 3 tasks of run scores, and per run 8 episodes each.
    episodes = {t: rng.normal(1.0 + 0.3 * k, 1.0, (5, 8)) for k, t in enumerate("xyz")}
    other = {t: rng.normal(0.7 + 0.3 * k, 1.0, (4, 8)) for k, t in enumerate("xyz")}
    return episodes, other


def test_recipe_aggregates_equal_rliables_on_the_same_score_matrices(score_matrices):
    from rliable import library, metrics

    a, _ = score_matrices
    ours = recipe_summary(a, n_resamples=3000, seed=4)
    run_matrix = np.stack([a[t].mean(axis=1) for t in "xyz"], axis=1)  # (runs, tasks)
    assert ours["mean"]["value"] == pytest.approx(metrics.aggregate_mean(run_matrix))
    # IQM over runs x episodes: rliable's aggregate_iqm of the (runs*episodes, tasks) matrix.
    flat = np.stack([a[t].reshape(-1) for t in "xyz"], axis=1)
    assert ours["iqm"]["value"] == pytest.approx(metrics.aggregate_iqm(flat))
    np.random.seed(9)
    _, ci = library.get_interval_estimates({"r": run_matrix},
                                           lambda m: np.array([metrics.aggregate_mean(m)]),
                                           reps=3000)
    width = ci["r"][1, 0] - ci["r"][0, 0]
    assert ours["mean"]["ci"] == pytest.approx([ci["r"][0, 0], ci["r"][1, 0]], abs=0.12 * width)
    sd_between = np.std(a["x"].mean(axis=1), ddof=1)
    assert ours["spread"]["x"]["between_runs"] == pytest.approx(sd_between)
    assert ours["note"] is None


def test_probability_of_improvement_over_runs_equals_rliables(score_matrices):
    from rliable import library, metrics

    a, b = score_matrices
    ours = recipe_comparison(a, b, n_resamples=1000, seed=6)
    ra = np.stack([a[t].mean(axis=1) for t in "xyz"], axis=1)
    rb = np.stack([b[t].mean(axis=1) for t in "xyz"], axis=1)
    poi = ours["probability_of_improvement"]
    assert poi["p"] == pytest.approx(metrics.probability_of_improvement(ra, rb))
    np.random.seed(5)
    _, ci = library.get_interval_estimates(
        {"ab": [ra, rb]}, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]),
        reps=1000)
    width = ci["ab"][1, 0] - ci["ab"][0, 0]
    assert poi["ci"] == pytest.approx([ci["ab"][0, 0], ci["ab"][1, 0]], abs=0.2 * width)
    assert ours["difference"]["value"] == pytest.approx(
        np.mean([a[t].mean() - b[t].mean() for t in "xyz"]))


def test_few_runs_are_said_plainly():
    one = recipe_summary({"t": [[1.0, 2.0, 3.0]]}, n_resamples=50)
    assert one["note"] == ONE_RUN
    assert "one training run: this is the variability of episodes, not of the recipe" in ONE_RUN
    two = recipe_comparison({"t": [[1.0, 2.0], [2.0, 3.0]]}, {"t": [[0.0, 1.0], [1.0, 1.0]]},
                            n_resamples=50)
    assert "at least 3" in two["note"]
    with pytest.raises(ValueError, match="same seeds"):
        recipe_comparison({"t": [[1.0, 2.0]]}, {"t": [[1.0]]})


def test_p_of_improvement_from_few_runs_says_how_few_and_never_reads_as_certainty():
    # 3 runs against 3, every run of A above every run of B: the bootstrap over runs is the
    # point [1, 1], which is not shown; the note says how few runs it rests on.
    won = recipe_comparison({"t": [[5.0, 6.0], [5.5, 6.5], [6.0, 7.0]]},
                            {"t": [[1.0, 2.0], [1.5, 2.5], [2.0, 3.0]]}, n_resamples=200)
    poi = won["probability_of_improvement"]
    assert poi["p"] == 1.0 and poi["ci"] is None and poi["runs"] == [3, 3]
    assert poi["note"].startswith("3 vs 3 runs: no interval")
    mixed = recipe_comparison({"t": [[5.0, 6.0], [1.0, 2.0], [6.0, 7.0]]},
                              {"t": [[1.5, 2.5], [5.5, 6.5], [2.0, 3.0]]}, n_resamples=200)
    poi = mixed["probability_of_improvement"]
    assert poi["ci"][0] < poi["ci"][1] and poi["note"] == "3 vs 3 runs: few, the interval is rough"
