"""comparison.json and comparison.html: runs on the same seeds, side by side and paired.

Everything is read from the runs' ``results.json`` (pass 1's numbers): per entry a summary,
per pair of entries the paired statistics of :func:`rolltape.stats.paired_comparison`
(per task for a suite), a learning curve when the entries are checkpoints, and rliable's
suite aggregates of normalized scores (random = 0, a named reference = 1) when a random
baseline and a reference are there. The page's charts are inline SVG from
:mod:`rolltape.outputs.plots`; nothing is fetched, no script runs.

May import: stats, outputs, files, errors, compare.runs. Never: policies, pass 1, pass 2,
executors.

Example (not run: it needs finished runs):
    >>> runs = load_runs(["runs/ab-old", "runs/ab-new"])
    >>> write_comparison(runs, "runs/ab-compare")
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from rolltape import stats
from rolltape.compare.runs import Key, LoadedRun, check_comparable
from rolltape.errors import UsageError
from rolltape.files import write_text, write_texts
from rolltape.outputs import plots
from rolltape.outputs.report import describe_policy
from rolltape.outputs.summary import interval, num

__all__ = ["COMPARISON_SCHEMA_VERSION", "baseline_entry", "comparison", "write_comparison"]

COMPARISON_SCHEMA_VERSION = 1
MAX_DIFF_SERIES = 6  # pairs drawn in the per-seed differences chart


def baseline_entry(runs: list[LoadedRun]) -> LoadedRun | None:
    """The random baseline a run was evaluated with (``--baseline random``), as an entry
    of its own, when the first run has one on every seed."""
    first = runs[0]
    if not first.baseline_rows or set(first.baseline_rows) != set(first.rows):
        return None
    entry = LoadedRun(first.run, "random")
    entry.rows = dict(first.baseline_rows)
    return entry


def _task_name(group: tuple[Any, Any]) -> str | None:
    suite, task = group
    return None if suite is None and task is None else f"{suite}/{task}"


def _finite_pairs(a: LoadedRun, b: LoadedRun, keys: list[Key]) -> list[Key]:
    return [k for k in keys if a.rows[k].ret is not None and b.rows[k].ret is not None]


def _pair(a: LoadedRun, b: LoadedRun, seed: int) -> list[dict[str, Any]]:
    """Paired statistics of a against b, one entry per task (one for a single env)."""
    out = []
    for group, keys in a.tasks().items():
        keys = _finite_pairs(a, b, keys)
        if not keys:
            continue
        ra, rb = a.returns(keys), b.returns(keys)
        result = stats.paired_comparison(ra, rb, a.successes(keys),
                                         b.successes(keys), a_name=a.label, b_name=b.label,
                                         seed=seed)
        result["task"] = _task_name(group)
        result["per_seed"] = [{"seed": k[2], "a": x, "b": y, "diff": x - y}
                              for k, x, y in zip(keys, ra, rb)]
        out.append(result)
    return out


def _suite_pair(a: LoadedRun, b: LoadedRun, seed: int) -> dict[str, Any]:
    """P(a > b) on each task, averaged over tasks (rliable's), seeds paired within tasks."""
    xs, ys = {}, {}
    for group, keys in a.tasks().items():
        keys = _finite_pairs(a, b, keys)
        if keys:
            xs[str(_task_name(group))], ys[str(_task_name(group))] = a.returns(keys), b.returns(keys)
    return {"a": a.label, "b": b.label,
            "probability_of_improvement": stats.suite_probability_of_improvement(
                xs, ys, paired=True, seed=seed)}


def _pairs_to_compare(entries: list[LoadedRun], baseline: LoadedRun | None
                      ) -> list[tuple[LoadedRun, LoadedRun]]:
    """Each entry against the one before it (is the newer better?), the last against the
    first when there are more than two, and each against the random baseline."""
    pairs = [(entries[i], entries[i - 1]) for i in range(1, len(entries))]
    if len(entries) > 2:
        pairs.append((entries[-1], entries[0]))
    if baseline is not None:
        pairs += [(e, baseline) for e in entries]
    return pairs


def _summary(run: LoadedRun) -> dict[str, Any]:
    """The entry's summary over all its episodes (one env), from its rows."""
    keys = [k for k, e in run.rows.items() if e.ret is not None]
    if not keys:
        return {"n": 0}
    return stats.summarize(run.returns(keys), run.successes(keys)).to_dict()


def _normalized(entries: list[LoadedRun], baseline: LoadedRun, reference: LoadedRun,
                warnings: list[str]) -> dict[str, dict[str, np.ndarray]] | None:
    """Per entry, per task: scores with the baseline's task mean at 0 and the reference's
    at 1. A task where the reference scores what random scores has nothing to scale by: it
    is left out of the aggregates (and said so); None when no task is left."""
    scores: dict[str, dict[str, np.ndarray]] = {e.label: {} for e in entries}
    flat = []
    for group, keys in reference.tasks().items():
        name = _task_name(group) or "env"
        rand = [r for k in keys if (r := baseline.rows[k].ret) is not None]
        ref = [r for k in keys if (r := reference.rows[k].ret) is not None]
        if not rand or not ref or np.mean(ref) == np.mean(rand):
            flat.append(name)
            continue
        for e in entries:
            values = [r for k in keys if (r := e.rows[k].ret) is not None]
            if values:
                scores[e.label][name] = stats.normalize_scores(values, float(np.mean(rand)),
                                                               float(np.mean(ref)))
    if flat:
        left = len(reference.tasks()) - len(flat)
        warnings.append(f"The reference '{reference.label}' scores what random scores on "
                        f"{', '.join(flat)}, so no score there can be normalized; "
                        + (f"the normalized aggregates cover the other {left} task(s)."
                           if left else "no normalized aggregates."))
    return scores if any(scores.values()) else None


def comparison(runs: list[LoadedRun], *, baseline: LoadedRun | None = None,
               reference: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The comparison of ``runs`` (checked to share env, seeds and counts), as JSON-safe
    data. ``baseline`` is the random baseline (found in the first run when not given);
    ``reference`` names the entry whose score normalizes to 1 for the suite aggregates."""
    if baseline is None and any(r.baseline for r in runs):  # a multi-policy run's own
        baseline = next(r for r in runs if r.baseline)
    runs = [r for r in runs if r is not baseline]
    check_comparable(runs + ([baseline] if baseline is not None else []))
    baseline = baseline or baseline_entry(runs)
    if baseline is not None and baseline.label in {r.label for r in runs}:
        baseline.label = f"{baseline.label}-baseline"  # a run of the user's named random
    if reference is not None and reference not in {r.label for r in runs}:
        raise UsageError(f"--reference '{reference}' is not one of the compared runs "
                         f"({', '.join(e.label for e in runs)}); name one of them.")
    warnings: list[str] = []
    everyone = runs + ([baseline] if baseline is not None else [])
    pairs = [p for a, b in _pairs_to_compare(runs, baseline) for p in _pair(a, b, seed)]
    first = runs[0]
    result: dict[str, Any] = {
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "identity": first.identity,
        "episodes": len(first.rows),
        "tasks": [_task_name(g) for g in first.tasks()],
        "seeds": sorted({k[2] for k in first.rows}),
        "entries": [{"label": e.label, "folder": str(e.path), "steps": e.steps,
                     "baseline": e is baseline,
                     "policy": describe_policy(e.run.results.policy) if e is not baseline
                     else "random policy",
                     "summary": _summary(e),
                     "returns": [e.rows[k].ret for g in e.tasks().values() for k in g
                                 if e.rows[k].ret is not None]} for e in everyone],
        "pairs": pairs,
        "suite_pairs": None, "learning_curve": None, "aggregates": None, "profiles": None,
        "reference": reference, "warnings": warnings,
    }
    several_tasks = len(first.tasks()) > 1
    if several_tasks:
        result["suite_pairs"] = [_suite_pair(a, b, seed)
                                 for a, b in _pairs_to_compare(runs, baseline)]
    ref = next((e for e in runs if e.label == reference), None)
    if ref is not None and baseline is None:
        warnings.append("--reference needs a random baseline on the same seeds (eval with "
                        "--baseline random); no normalized aggregates.")
    scores = _normalized(runs, baseline, ref, warnings) if ref is not None and baseline else None
    if scores is not None:
        result["aggregates"] = {label: stats.aggregate_scores(s, seed=seed)
                                for label, s in scores.items() if s}
        values = np.concatenate([v for s in scores.values() for v in s.values()])
        taus = np.linspace(min(0.0, float(values.min())), max(1.0, float(values.max())), 33)
        result["profiles"] = {label: stats.performance_profile(s, taus, seed=seed)
                              for label, s in scores.items() if s}
    steps = [e for e in runs if e.steps is not None]
    if len(steps) >= 2:
        if several_tasks and result["aggregates"] is None:
            warnings.append("A learning curve over a suite needs normalized scores (give "
                            "--reference and a random baseline); none drawn.")
        else:
            result["learning_curve"] = _curve(steps, result, several_tasks, baseline)
    return result


def _curve(entries: list[LoadedRun], result: dict[str, Any], normalized: bool,
           baseline: LoadedRun | None) -> dict[str, Any]:
    """IQM and mean with their 95% intervals at each checkpoint's training steps."""
    points = []
    for e in sorted(entries, key=lambda e: e.steps or 0):
        if normalized:
            agg = result["aggregates"][e.label]
            iqm, mean = agg["iqm"], agg["mean"]
            point = {"iqm": iqm["value"], "iqm_ci": iqm["ci"], "mean": mean["value"],
                     "mean_ci": mean["ci"]}
        else:
            s = next(x["summary"] for x in result["entries"] if x["label"] == e.label)
            point = {k: s.get(k) for k in ("iqm", "iqm_ci", "mean", "mean_ci")}
        points.append({"label": e.label, "steps": e.steps, **point})
    base = None
    if baseline is not None:
        base = 0.0 if normalized else next(x["summary"].get("mean") for x in result["entries"]
                                           if x["baseline"])
    return {"points": points, "baseline_mean": base,
            "scale": "normalized score" if normalized else "return"}


# ----------------------------------------------------------------------------- the page


def _colors(result: dict[str, Any]) -> dict[str, str]:
    labels = [e["label"] for e in result["entries"] if not e["baseline"]]
    colors = {label: plots.PALETTE[i % (len(plots.PALETTE) - 1)] for i, label in enumerate(labels)}
    colors.update({e["label"]: plots.ROLE_COLORS["baseline"] for e in result["entries"]
                   if e["baseline"]})
    return colors


def _charts(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(title, caption, svg) of each picture."""
    colors = _colors(result)
    charts = []
    base = {e["label"] for e in result["entries"] if e["baseline"]}
    shown = [p for p in result["pairs"] if p["b"] not in base][-MAX_DIFF_SERIES:] or \
        result["pairs"][:MAX_DIFF_SERIES]
    if len(result["tasks"]) > 1:  # returns of other tasks have other scales: per task
        charts.append(("Per task",
                       "Each task's P(first > second) on its paired seeds, the bar its "
                       "bootstrap 95% interval: right of 0.5 the first policy tends to win. "
                       "Green: better, red: worse, grey: no detectable difference (the "
                       "verdicts above).",
                       _task_forest(result, base)))
    elif shown:
        series = []
        for k, p in enumerate(shown):
            ordered = sorted(p["per_seed"], key=lambda r: (r["diff"], r["seed"]))
            task = f" [{p['task']}]" if p["task"] else ""
            series.append(plots.Series(
                f"{p['a']} − {p['b']}{task}", list(range(1, len(ordered) + 1)),
                [r["diff"] for r in ordered], plots.PALETTE[k % len(plots.PALETTE)],
                line=False, tips=[f"seed {r['seed']}: {p['a']} {num(r['a'])}, {p['b']} "
                                  f"{num(r['b'])}, difference {num(r['diff'], sign=True)}"
                                  for r in ordered]))
        charts.append(("Per-seed paired differences",
                       "One dot per seed: the return of the first policy minus the second's "
                       "on the same seed, sorted. Dots above zero are seeds the first won; a "
                       "difference that is real keeps most dots on one side.",
                       plots.line_chart(series, title="Paired differences per seed",
                                        desc="Per-seed return differences, sorted.",
                                        xlabel="seeds, sorted by difference",
                                        ylabel="return difference", integer_x=True,
                                        uid="diffs")))
    strips = []
    for e in result["entries"]:
        label, s = e["label"], e["summary"]
        strips.append(plots.Strip(label, e["returns"], colors[label], center=s.get("iqm"),
                                  interval=tuple(s["iqm_ci"]) if s.get("iqm_ci") else None))
    if strips and len(result["tasks"]) <= 1:
        charts.append(("Return distributions",
                       "Every episode's return as a dot, per policy; the diamond is the IQM "
                       "and the bar its bootstrap 95% interval.",
                       plots.strip_chart(strips, title="Distribution of returns",
                                         desc="Episode returns per policy.", xlabel="return",
                                         uid="dist")))
    curve = result.get("learning_curve")
    if curve:
        pts = curve["points"]
        xs = [p["steps"] for p in pts]
        series = [plots.Series("IQM (95% CI)", xs, [p["iqm"] for p in pts], plots.PALETTE[0],
                               band=([p["iqm_ci"][0] for p in pts], [p["iqm_ci"][1] for p in pts]),
                               tips=[f"{p['label']}: IQM {num(p['iqm'])} "
                                     f"{interval(p['iqm_ci'])}" for p in pts]),
                  plots.Series("mean (95% CI)", xs, [p["mean"] for p in pts], plots.PALETTE[2],
                               band=([p["mean_ci"][0] for p in pts],
                                     [p["mean_ci"][1] for p in pts]),
                               tips=[f"{p['label']}: mean {num(p['mean'])} "
                                     f"{interval(p['mean_ci'])}" for p in pts])]
        if curve["baseline_mean"] is not None:
            series.append(plots.Series("random policy", [xs[0], xs[-1]],
                                       [curve["baseline_mean"]] * 2,
                                       plots.ROLE_COLORS["baseline"], dash=True, markers=False))
        charts.append(("Learning curve",
                       f"{curve['scale'].capitalize()} of each checkpoint against its training "
                       "steps: IQM and mean with bootstrap 95% intervals (shaded), the random "
                       "policy on the same seeds as a dashed line.",
                       plots.line_chart(series, title="Learning curve over checkpoints",
                                        desc="IQM and mean per checkpoint vs training steps.",
                                        xlabel="training steps", ylabel=curve["scale"],
                                        uid="curve")))
    profiles = result.get("profiles")
    if profiles:
        series = [plots.Series(label, p["taus"], p["fraction"], colors[label], markers=False,
                               band=(p["ci_low"], p["ci_high"]))
                  for label, p in profiles.items()]
        charts.append(("Performance profiles",
                       "Fraction of episodes whose normalized score (random 0, "
                       f"'{result['reference']}' 1) exceeds each threshold, averaged over "
                       "tasks, with stratified bootstrap 95% bands. A curve above another "
                       "everywhere dominates it.",
                       plots.line_chart(series, title="Performance profiles",
                                        desc="Score distributions per policy.",
                                        xlabel="normalized score τ",
                                        ylabel="fraction of episodes > τ", uid="profiles")))
    return charts


VERDICT_COLORS = {"better": "#1a7f37", "worse": "#cf222e"}  # as the page's table says them
MAX_FOREST_ROWS = 90  # rows of the per-task picture: fewer pairs shown for many tasks


def _task_forest(result: dict[str, Any], base: set[str]) -> str:
    """Inline SVG: per task, one row per pair with P(first > second) (dot) and its 95%
    interval (bar) on a 0..1 axis, coloured by the pair's verdict; pairs against the
    random baseline come after the others, as many as fit."""
    combos = list(dict.fromkeys((p["a"], p["b"]) for p in result["pairs"]))
    combos.sort(key=lambda c: c[1] in base)  # stable: the user's pairs first
    tasks = result["tasks"]
    combos = combos[:max(1, min(MAX_DIFF_SERIES, MAX_FOREST_ROWS // len(tasks) - 1))]
    by = {(p["a"], p["b"], p["task"]): p for p in result["pairs"]}
    right = 175  # room for "no detectable difference"
    longest = max(len(f"{a} vs {b}") for a, b in combos)
    left = min(260, 24 + plots.CHAR_W * longest)
    width = max(560, int(left + 300 + right))  # the page scales it down to its column
    rows: list[plots.ForestRow] = []
    for t in tasks:
        rows.append(plots.ForestRow(str(t), heading=True))
        for a, b in combos:
            pair = by.get((a, b, t))
            if pair is None:
                rows.append(plots.ForestRow(f"{a} vs {b}", missing="no finite pair"))
                continue
            r = pair["returns"]
            poi = r["probability_of_improvement"]
            colour = VERDICT_COLORS.get(r["verdict"], plots.MUTED)
            lo, hi = poi["ci"] if poi.get("ci") else (poi["p"], poi["p"])
            rows.append(plots.ForestRow(f"{a} vs {b}", (lo, poi["p"], hi), colour,
                                        tip=r["sentence"], note=r["verdict"],
                                        note_color=colour))
    return plots.forest_chart(rows, title="P(first > second) per task",
                              desc="One row per task and pair: the dot is the probability "
                              "of improvement, the bar its 95% interval.",
                              caption="P(first > second) per task (95% interval)",
                              ticks=(0.0, 0.25, 0.5, 0.75, 1.0), marks=(0.5,), left=left,
                              right=right, width=width, row_height=20, uid="task-forest")


def _g(x: Any, sign: bool = False) -> str:
    """A number to 3 significant digits (returns span 0.001 to 10,000), n/a for None."""
    if x is None:
        return "n/a"
    # Judged after rounding: 999.94 is "1,000" (3 significant digits would say "1e+03").
    if abs(float(f"{x:.3g}")) >= 1000:
        return f"{x:+,.0f}" if sign else f"{x:,.0f}"
    return f"{x:+.3g}" if sign else f"{x:.3g}"


def _gi(pair: Any, sign: bool = False) -> str:
    if not pair or pair[0] is None or pair[1] is None:
        return "n/a"
    return f"[{_g(pair[0], sign)}, {_g(pair[1], sign)}]"


def _percent_interval(pair: Any) -> str:
    """A rate's interval as the rate is shown: '[7%, 43%]'."""
    if not pair or pair[0] is None or pair[1] is None:
        return "n/a"
    return f"[{pair[0]:.0%}, {pair[1]:.0%}]"


def _verdict_class(verdict: str) -> str:
    return {"better": "better", "worse": "worse"}.get(verdict, "none")


def _html(result: dict[str, Any], out: Path) -> str:
    """comparison.html, from its template (the run report's stylesheet)."""
    from rolltape.outputs.report import render_page

    ident = ", ".join(f"{k} {', '.join(v) if isinstance(v, list) else v}"
                      for k, v in result["identity"].items() if v not in ({}, None))
    entries = []
    for e in result["entries"]:
        folder = Path(e["folder"])
        shown = (folder / "report.html").is_file() and not e["baseline"]
        entries.append({**e, "report": Path(os.path.relpath(folder, out)).as_posix()
                        + "/report.html" if shown else None})
    strip = result.get("strip")
    if strip and strip.get("path"):
        status = "verified: every part replayed exactly what pass 1 earned" \
            if strip["verified"] else "NOT verified: " + "; ".join(strip.get("problems") or [])
        strip = {**strip, "status": status,
                 "href": Path(os.path.relpath(out / strip["path"], out)).as_posix()}
    else:
        strip = None
    return render_page(
        "comparison.html.j2", r=result, until=result.get("until"), ident=ident, entries=entries, strip=strip,
        charts=_charts(result),
        written=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        g=_g, gi=_gi, num=num, interval=interval, percent_interval=_percent_interval,
        verdict_class=_verdict_class if not result.get("until") else lambda v: "none")


def write_comparison(runs: list[LoadedRun], out: str | os.PathLike[str], *,
                     baseline: LoadedRun | None = None, reference: str | None = None,
                     strip: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compute the comparison and write ``out/comparison.json`` and ``out/comparison.html``
    (the folder is made when missing). Returns what comparison.json holds."""
    result = comparison(runs, baseline=baseline, reference=reference)
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise UsageError(f"--out '{root}' is a file; give a folder for comparison.json and "
                         "comparison.html.")
    for e in result["entries"]:  # folders relative to the comparison: the pair moves together
        e["folder"] = Path(os.path.relpath(Path(e["folder"]), root.absolute())).as_posix()
    result["strip"] = strip
    html_result = {**result, "entries": [{**e, "folder": str(root / e["folder"])}
                                         for e in result["entries"]]}
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Both made before either is written, and neither left alone: the pair is one result.
        write_texts({root / "comparison.json": json.dumps(_json_safe(result), indent=2,
                                                          allow_nan=False) + "\n",
                     root / "comparison.html": _html(html_result, root)})
    except OSError as exc:
        raise UsageError(f"Cannot write the comparison to '{root}' ({exc.strerror}); free "
                         "some space or choose a writable --out.") from None
    return result


def sequential_page(out: str | os.PathLike[str], result: dict[str, Any],
                    until: dict[str, Any]) -> None:
    """Rewrite ``out/comparison.html`` of an ``--until decided`` run so that it leads with
    the sequential (anytime-valid) verdict, the difference's direction named; the fixed-n
    verdicts follow, labelled as not valid after looking (the run stopped on its looks)."""
    root = Path(out)
    html_result = {**result, "until": until,
                   "entries": [{**e, "folder": str(root / e["folder"])}
                               for e in result["entries"]]}
    try:
        write_text(root / "comparison.html", _html(html_result, root))
    except OSError as exc:
        raise UsageError(f"Cannot write the comparison to '{root}' ({exc.strerror}); free "
                         "some space or choose a writable --out.") from None


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What the command line prints: one line per policy, then one verdict per pair."""
    lines = []
    width = max(len(e["label"]) for e in result["entries"])
    for e in result["entries"]:
        s = e["summary"]
        steps = f"{e['steps']:>10,} steps" if e["steps"] is not None else " " * 16
        success = "" if s.get("success_rate") is None else \
            f"  success {s['success_rate']:.0%} {_percent_interval(s['success_ci'])}"
        lines.append(f"{e['label']:<{width}} {steps}  mean {num(s.get('mean'))} "
                     f"{interval(s.get('mean_ci'))}  IQM {num(s.get('iqm'))} "
                     f"{interval(s.get('iqm_ci'))}{success}")
    for label, agg in (result.get("aggregates") or {}).items():
        lines.append(f"normalized (random 0, {result['reference']} 1): {label}  " + "  ".join(
            f"{name} {num(agg[key]['value'])} {interval(agg[key]['ci'])}"
            for key, name in (("iqm", "IQM"), ("mean", "mean"), ("median", "median"),
                              ("optimality_gap", "optimality gap"))))
    for p in result.get("suite_pairs") or []:
        poi = p["probability_of_improvement"]
        lines.append(f"across {poi['tasks']} tasks: P({p['a']} > {p['b']}) = {num(poi['p'])} "
                     f"{interval(poi['ci'])}")
    for p in result["pairs"]:
        task = f"[{p['task']}] " if p["task"] else ""
        lines.append(f"{task}{p['returns']['sentence']}")
        if p["success"] is not None:
            lines.append(f"{task}{p['success']['sentence']}")
    return lines
