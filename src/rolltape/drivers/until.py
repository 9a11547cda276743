"""Episode budgets that stop when the answer is known: ``rolltape eval --until``.

``--until 'width<W'`` plays episodes in batches (``--batch``, default 10) until every
task's 95% anytime-valid interval is narrower than W (success rates in percentage points,
returns in return units), or ``--max-episodes`` is reached. ``--until decided`` (two
policies) plays both in batches on the same seeds until, on every task, the anytime-valid
interval of the paired difference excludes 0 (one is better) or lies inside
``[-margin, margin]`` (they are equivalent within ``--margin``).

Each batch is an ordinary resumed :func:`rolltape.evaluate` of the same run folder with
more episodes, so episode i is still reset with seed + i, its tape is the same as in a
fixed-n run, and an interrupted ``--until`` run continues with ``--resume``. The looks are
at ``batch, 2 batch, ...``; each look reads only the first n episodes, so a resumed run
(even one that had played past a stopping point) reaches the same decision at the same n.

The intervals are confidence sequences (:mod:`rolltape.stats.sequential`): a success
rate gets the beta-binomial mixture CS, a return (within ``--return-bounds``) and a paired
difference get the betting CS. They hold at every look at once, so stopping on a look
keeps their 95%. Beside them, ``until.json`` keeps the fixed-n interval of the episodes
played (Wilson, or a percentile bootstrap of the mean), which does not.

May import: evaluate, compare, stats, outputs, record, files, errors. Never: torch, SB3, GL.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.errors import RunFailed, UsageError
from rolltape.files import write_json, write_text
from rolltape.limits import MAX_EPISODES, MAX_LOOKS, MAX_RETURN_BOUND
from rolltape.record import Episode, Results, Run
from rolltape.stats import bootstrap_ci, wilson_interval
from rolltape.stats.sequential import bernoulli_cs, betting_cs

__all__ = ["Until", "direction", "evaluate_until", "parse_until", "parse_bounds",
           "summary_lines"]

ANYTIME = "95% anytime-valid"
_WIDTH = re.compile(r"^\s*width\s*<\s*(?P<w>[0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Until:
    """When an evaluation may stop: ``rule`` "width" (every task narrower than ``width``)
    or "decided" (every task's paired difference decided, ``margin`` for equivalence)."""

    rule: str
    width: float | None
    margin: float
    max_episodes: int
    batch: int

    @property
    def text(self) -> str:
        return f"width<{self.width:g}" if self.rule == "width" else "decided"

    def looks(self) -> list[int]:
        """Episode counts at which to look: every batch, and --max-episodes last."""
        ns = list(range(self.batch, self.max_episodes, self.batch)) + [self.max_episodes]
        return ns


def parse_until(text: str, *, margin: float = 0.0, max_episodes: int | None = None,
                batch: int = 10) -> Until:
    """``--until`` as given on the command line, checked (a UsageError names the fix)."""
    match = _WIDTH.match(text)
    if match:
        try:
            width: float | None = float(match["w"])
        except ValueError:
            width = None
        if width is None or not math.isfinite(width) or width <= 0:
            raise UsageError(f"--until '{text}': the width must be a number above 0, e.g. "
                             "'width<10' (percentage points for success rates).")
        rule = "width"
    elif text.strip() == "decided":
        rule, width = "decided", None
    else:
        raise UsageError(f"--until '{text}' is not a stopping rule; give 'width<W' (every "
                         "task's interval narrower than W) or 'decided' (a comparison of two "
                         "policies decided either way).")
    if max_episodes is None:
        raise UsageError("--until needs --max-episodes (the most episodes to spend per task "
                         "and policy), e.g. --max-episodes 500.")
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, got {batch}.")
    if max_episodes < batch:
        raise UsageError(f"--max-episodes {max_episodes} is below one --batch ({batch}); "
                         "raise it or lower --batch.")
    if max_episodes > MAX_EPISODES:
        raise UsageError(f"--max-episodes {max_episodes} is more than a run can play; give at "
                         f"most {MAX_EPISODES:.0e}.")
    if -(-max_episodes // batch) > MAX_LOOKS:  # every look is kept (until.json, the chart)
        raise UsageError(f"--max-episodes {max_episodes} in batches of {batch} is "
                         f"{-(-max_episodes // batch):,} looks, more than {MAX_LOOKS:,}; raise "
                         "--batch or lower --max-episodes.")
    if not (math.isfinite(margin) and margin >= 0):
        raise UsageError(f"--margin must be 0 or more, got {margin}.")
    if margin and rule != "decided":
        raise UsageError("--margin applies to --until decided; drop it, or use --until decided.")
    return Until(rule, width, float(margin), int(max_episodes), int(batch))


def parse_bounds(text: str | None) -> tuple[float, float] | None:
    """``--return-bounds LO,HI`` (the least and most one episode can return)."""
    if text is None:
        return None
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--return-bounds '{text}' is not LO,HI; give the least and most one "
                         "episode can return, e.g. 0,500 for CartPole-v1.") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise UsageError(f"--return-bounds '{text}': need finite LO < HI.")
    if max(abs(lo), abs(hi)) > MAX_RETURN_BOUND:  # the interval's arithmetic would overflow
        raise UsageError(f"--return-bounds '{text}' reaches beyond +-{MAX_RETURN_BOUND:g}; give "
                         "the least and most one episode can really return.")
    return lo, hi


# ----------------------------------------------------------------------------- one look


def _tasks(results: Results, n: int) -> dict[str, list[Episode]]:
    """The first n episodes of each task (by index), refusing a task that has fewer."""
    out: dict[str, list[Episode]] = {}
    for task in results.tasks:
        mine = sorted((e for e in results.episodes if e.key.task_key == task
                       and e.key.index < n), key=lambda e: e.key.index)
        name = "/".join(p for p in task if p) or results.env_id
        if len(mine) < n:
            raise UsageError(f"task '{name}' has {len(mine)} of the {n} episodes --until asked "
                             "for (a suite manifest that fixes a task's episodes, or failed "
                             "episodes); remove 'episodes' from the manifest or --resume.")
        out[name] = mine
    return out


def _measure(results: Results, task: str, episodes: list[Episode],
             bounds: tuple[float, float] | None) -> tuple[str, np.ndarray, tuple[float, float]]:
    """What a task is judged on: its success flags (all known) or its returns in bounds."""
    key = episodes[0].key.task_key
    flags = [e.success(results.rule_of(key)) for e in episodes]
    if all(f is not None for f in flags):
        return "success", np.array(flags, dtype=float), (0.0, 1.0)
    if bounds is None:
        raise UsageError(f"task '{task}' reports no success, so --until judges its returns, "
                         "which needs --return-bounds LO,HI (the least and most one episode "
                         "can return, e.g. 0,500 for CartPole-v1).")
    rets = np.array([e.ret if e.ret is not None else np.nan for e in episodes])
    if not np.all(np.isfinite(rets)):
        raise UsageError(f"task '{task}' has episodes without a finite return; --until cannot "
                         "bound their mean.")
    if rets.min() < bounds[0] or rets.max() > bounds[1]:  # found at the first look it shows
        raise UsageError(f"task '{task}' returned {rets.min():g} to {rets.max():g}, outside "
                         f"--return-bounds {bounds[0]:g},{bounds[1]:g}; give bounds that hold "
                         "every episode's return.")
    return "return", rets, bounds


def _scale(measure: str) -> float:
    return 100.0 if measure == "success" else 1.0  # success widths are percentage points


def _one(measure: str, values: np.ndarray, bounds: tuple[float, float]) -> dict[str, Any]:
    if measure == "success":
        lo, hi = bernoulli_cs(values)
        fixed = wilson_interval(int(values.sum()), int(values.size))
    else:
        lo, hi = betting_cs(values, *bounds)
        fixed = bootstrap_ci(values, np.mean) if values.size > 1 else (values[0], values[0])
    k = _scale(measure)
    return {"measure": measure, "estimate": float(values.mean()) * k,
            "anytime": [float(lo[-1]) * k, float(hi[-1]) * k],
            "fixed_n": [float(fixed[0]) * k, float(fixed[1]) * k],
            "width": float(hi[-1] - lo[-1]) * k}


def _paired(measure: str, a: np.ndarray, b: np.ndarray, bounds: tuple[float, float],
            margin: float, names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    span = bounds[1] - bounds[0]
    d = a - b
    lo, hi = betting_cs(d, -span, span)
    fixed = bootstrap_ci(d, np.mean) if d.size > 1 else (d[0], d[0])
    k = _scale(measure)
    lo_, hi_ = float(lo[-1]) * k, float(hi[-1]) * k
    verdict = (f"{names[0]} better" if lo_ > 0 else f"{names[1]} better" if hi_ < 0 else
               f"equivalent within {margin:g}" if margin and -margin <= lo_ and hi_ <= margin
               else "not decided")
    return {"measure": measure, "difference": direction(names),
            "estimate": float(d.mean()) * k, "anytime": [lo_, hi_],
            "fixed_n": [float(fixed[0]) * k, float(fixed[1]) * k], "width": hi_ - lo_,
            "verdict": verdict}


def direction(names: tuple[str, str] | list[str]) -> str:
    """Which minus which, by name: 'steps-10000 − steps-30000' (A − B)."""
    return f"{names[0]} − {names[-1]}"



def look(until: Until, runs: list[Results], n: int, bounds: tuple[float, float] | None,
         names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    """The intervals after the first ``n`` episodes of each run, and whether to stop."""
    if until.rule == "width":
        tasks = _tasks(runs[0], n)
        per = {}
        for name, eps in tasks.items():
            measure, values, bnd = _measure(runs[0], name, eps, bounds)
            per[name] = _one(measure, values, bnd)
        done = all(t["width"] < (until.width or 0) for t in per.values())
    else:
        ta, tb = _tasks(runs[0], n), _tasks(runs[1], n)
        per = {}
        for name in ta:
            ma, va, bnd = _measure(runs[0], name, ta[name], bounds)
            mb, vb, _ = _measure(runs[1], name, tb[name], bounds)
            if ma != mb:  # one reports success and the other not: judge both on returns
                ma, va, bnd = _measure_returns(runs[0], name, ta[name], bounds)
                _, vb, _ = _measure_returns(runs[1], name, tb[name], bounds)
            per[name] = _paired(ma, va, vb, bnd, until.margin, names)
        done = all(t["verdict"] != "not decided" for t in per.values())
    return {"episodes": n, "tasks": per, "stop": done}


def _measure_returns(results: Results, task: str, episodes: list[Episode],
                     bounds: tuple[float, float] | None
                     ) -> tuple[str, np.ndarray, tuple[float, float]]:
    stripped = [Episode(e.key, e.ret, e.length) for e in episodes]  # no success flags
    return _measure(results, task, stripped, bounds)


# ----------------------------------------------------------------------------- the loop


def _finished(folder: Path) -> Results | None:
    """The results of the finished run in ``folder``, or None when there is none."""
    return Run.load(folder).results if (folder / "results.json").is_file() else None


def _played(results: Results) -> int:
    """Episodes of the task that has the fewest."""
    counts = [sum(1 for e in results.episodes if e.key.task_key == t) for t in results.tasks]
    return min(counts) if counts else 0


def _ensure(env: str | None, policy: str, folder: Path, n: int, vecnormalize: str | None,
            first: bool, overwrite: bool, options: dict[str, Any]) -> Results:
    """The run in ``folder`` with at least n episodes per task (played when missing)."""
    from rolltape.evaluation import evaluate

    done = _finished(folder)
    if done is not None and _played(done) >= n:
        return done
    quiet = {**options, "video": 0, "report": False, "viewer": False}
    run = evaluate(env, policy, out=folder, episodes=n, vecnormalize=vecnormalize,
                   overwrite=overwrite and first, resume=not (first and overwrite), **quiet)
    if run.results.failed:  # the kept episodes stay for --resume (not a usage error)
        said = next((w for w in run.results.warnings if "failed" in w), "")
        raise RunFailed(f"in '{folder}': {said or 'episodes failed.'} --until looks at every "
                        "episode of a batch, so it stopped there.")
    return run.results


def evaluate_until(env: str | None, policies: list[str], until: Until, *,
                   out: str | os.PathLike[str], return_bounds: tuple[float, float] | None = None,
                   vecnormalize: str | None = None, overwrite: bool = False,
                   resume: bool = False, **options: Any) -> dict[str, Any]:
    """Evaluate in batches until ``until`` holds or its budget is spent; then finish the
    run(s) with ``options`` as asked (videos, reports; a comparison for two policies) and
    write ``until.json`` and ``until.svg`` (interval width against episodes). Returns
    until.json's content."""
    from rolltape.compare.checkpoints import expand_policies
    from rolltape.outputs.artifacts import refuse_existing

    options.pop("episodes", None)  # the looks set how many
    entries = expand_policies(list(policies), vecnormalize)
    if until.rule == "decided" and len(entries) != 2:
        raise UsageError(f"--until decided compares two policies; got {len(entries)} "
                         "(give exactly two --policy).")
    if until.rule == "width" and len(entries) != 1:
        raise UsageError("--until width<W judges one policy's intervals; give one --policy "
                         "(or --until decided with two).")
    if overwrite and resume:
        raise UsageError("--overwrite and --resume contradict each other: --resume continues "
                         "the run in --out, --overwrite starts it again; pass one.")
    root = Path(out)
    if not resume:
        refuse_existing(root, overwrite)
    folders = [root] if len(entries) == 1 else [root / e.label for e in entries]
    # The first folder this command makes: removed again if a look refuses the run (a
    # return without --return-bounds is only known once the first batch is played).
    created = next((p for p in reversed([root, *root.parents]) if not p.exists()), None)
    trace: list[dict[str, Any]] = []
    first = True
    try:
        for n in until.looks():
            runs = [_ensure(env, e.policy, f, n, e.vecnormalize, first, overwrite, options)
                    for e, f in zip(entries, folders)]
            first = False
            names = (entries[0].label, entries[-1].label)
            trace.append(look(until, runs, n, return_bounds, names))
            if trace[-1]["stop"]:
                break
    except UsageError:
        if created is not None and not resume:
            shutil.rmtree(created, ignore_errors=True)
        raise
    n = trace[-1]["episodes"]
    if len(entries) == 1:
        from rolltape.evaluation import evaluate

        evaluate(env, entries[0].policy, out=root, episodes=n, vecnormalize=entries[0].vecnormalize,
                 resume=True, **options)
        comparison = None
    else:
        from rolltape.drivers.sweep import evaluate_many
        from rolltape.evaluation import evaluate

        for e, f in zip(entries, folders):  # videos and reports as asked
            evaluate(env, e.policy, out=f, episodes=n, vecnormalize=e.vecnormalize,
                     resume=True, **options)
        comparison = evaluate_many(env, policies, out=root, vecnormalize=vecnormalize,
                                   episodes=n, resume=True, **options).comparison
    result = _record(until, trace, [e.label for e in entries], comparison)
    write_json(root / "until.json", result)
    chart = width_chart(result)
    write_text(root / "until.svg", chart)
    if comparison is not None:  # its page leads with this verdict, not the fixed-n one
        from rolltape.compare.report import sequential_page

        sequential_page(root, comparison, result)
    # The picture where the numbers are: the comparison's page, or the one run's report.
    page = root / ("comparison.html" if comparison is not None else "report.html")
    text = page.read_text() if page.is_file() else ""
    if "</main>" in text:
        from html import escape

        section = (f"<h2>Stopping (--until {escape(result['until'])})</h2><p>"
                   f"{escape(result['reason'])}.</p><figure>{chart}</figure>")
        write_text(page, text.replace("</main>", section + "</main>", 1))
    return result


def _record(until: Until, trace: list[dict[str, Any]], labels: list[str],
            comparison: dict[str, Any] | None) -> dict[str, Any]:
    last = trace[-1]
    n = last["episodes"]
    if last["stop"]:
        why = (f"every task's {ANYTIME} interval was narrower than {until.width:g}"
               if until.rule == "width" else
               "every task's paired difference was decided (" + ", ".join(
                   f"{t}: {v['verdict']}" for t, v in last["tasks"].items()) + ")")
        reason = f"stopped at {n} episodes: {why}"
    else:
        reason = (f"ran to --max-episodes {n}: "
                  + ("not every task's interval was narrower than "
                     f"{until.width:g}" if until.rule == "width" else
                     "the comparison was not decided on every task"))
    spent = {task: n * len(labels) for task in last["tasks"]}
    return {"until": until.text, "margin": until.margin, "batch": until.batch,
            "max_episodes": until.max_episodes, "policies": labels, "stopped": bool(last["stop"]),
            "reason": reason, "episodes": n, "episodes_spent": spent,
            "saved": {task: (until.max_episodes - n) * len(labels) for task in last["tasks"]},
            "interval": ANYTIME, "looks": trace,
            # The verdict of a sequential run is the anytime-valid one (the fixed-n
            # intervals of comparison.json are not valid after looking).
            **({"difference": direction(labels),
                "verdict": {t: v["verdict"] for t, v in last["tasks"].items()}}
               if until.rule == "decided" else {"verdict": None})}


def width_chart(result: dict[str, Any]) -> str:
    """The picture of an --until run against episodes, with the stopping point ringed.
    ``width<W``: each task's interval width (anytime-valid, and fixed-n dashed) and W.
    ``decided``: the paired difference with its anytime-valid interval as a band, the
    fixed-n interval dashed, and 0 (and +-margin)."""
    from rolltape.outputs.plots import PALETTE, Series, line_chart

    series = []
    looks = result["looks"]
    ns = [lk["episodes"] for lk in looks]
    decided = result["until"] == "decided"
    stop = f"{'stopped' if result['stopped'] else 'budget spent'} at {ns[-1]}: {result['reason']}"
    for k, task in enumerate(looks[-1]["tasks"]):
        color = PALETTE[k % len(PALETTE)]
        rows = [lk["tasks"][task] for lk in looks]
        hollow = [False] * (len(ns) - 1) + [True]
        if decided:
            series.append(Series(f"{task}: {direction(result['policies'])}, band {ANYTIME}", ns,
                                 [r["estimate"] for r in rows], color, hollow=hollow,
                                 band=([r["anytime"][0] for r in rows],
                                       [r["anytime"][1] for r in rows]), end_tip=stop))
            for side, name in ((0, "fixed-n (not valid after looking)"), (1, None)):
                series.append(Series(name or "", ns, [r["fixed_n"][side] for r in rows],
                                     color, dash=True, markers=False))
        else:
            series.append(Series(f"{task}: {ANYTIME}", ns, [r["width"] for r in rows], color,
                                 hollow=hollow, end_tip=stop))
            series.append(Series(f"{task}: fixed-n (not valid after looking)", ns,
                                 [r["fixed_n"][1] - r["fixed_n"][0] for r in rows], color,
                                 dash=True, markers=False))
    if decided:
        lines = [(0.0, "no difference")] + ([(result["margin"], "+-margin"),
                                             (-result["margin"], "")] if result["margin"] else [])
    else:
        lines = [(float(result["until"][len("width<"):]), "stop below "
                  + result["until"][len("width<"):])]
    for y, name in lines:
        series.append(Series(name, [ns[0], ns[-1]], [y, y], "#000000", dash=True,
                             markers=False))
    title = ("Paired difference against episodes" if decided
             else "Interval width against episodes")
    return line_chart([s for s in series], title=title, desc=stop,
                      xlabel=f"episodes per policy (ringed: {stop.split(':')[0]})",
                      ylabel=f"difference ({direction(result['policies'])})" if decided
                      else "width of the 95% interval",
                      integer_x=True, uid="until")


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What the CLI prints after an --until run."""
    lines = [f"--until {result['until']}: {result['reason']}."]
    for task, t in result["looks"][-1]["tasks"].items():
        what = (f"{t['verdict']}: difference {direction(result['policies'])} ="
                if "verdict" in t else t["measure"])
        unit = " pts" if t["measure"] == "success" else ""
        lines.append(f"  {task}: {what} {t['estimate']:.4g}{unit}, {ANYTIME} "
                     f"[{t['anytime'][0]:.4g}, {t['anytime'][1]:.4g}] (fixed-n "
                     f"[{t['fixed_n'][0]:.4g}, {t['fixed_n'][1]:.4g}], not valid after "
                     "looking)")
        per = len(result["policies"])
        lines.append(f"    episodes spent: {result['episodes_spent'][task]}"
                     + (f" ({result['episodes']} per policy)" if per > 1 else "")
                     + f"; saved {result['saved'][task]} of the --max-episodes budget")
    return lines
