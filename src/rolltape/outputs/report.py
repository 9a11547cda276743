"""``rolltape report RUN``: one self-contained HTML page for a finished run.

The page is drawn from the run's record (:class:`rolltape.record.Run`: every number from
pass 1, provenance, the videos), the tapes of the drawn episodes for their cumulative
reward, and ``videos/`` for the players. Episodes are matched by their full key (role,
suite, task, index, seed), and a suite's charts are drawn per task, each on its own axes. The summary's cells come from
:mod:`rolltape.outputs.summary` (as the CLI's and the notebook's do), the charts are inline
SVG drawn by :mod:`rolltape.outputs.plots`, styles are inline; nothing is fetched from the
network and nothing needs JavaScript.

May import: tape, envs, stats, files, errors, outputs. Never: policies, pass 1, executors.

Example (not run: it needs a finished run):
    >>> build_report("runs/cheetah")
    PosixPath('runs/cheetah/report.html')
"""

from __future__ import annotations

import json
import os
import shlex
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote, urlsplit

from rolltape.errors import UsageError
from rolltape.files import write_text
from rolltape.outputs import plots
from rolltape.outputs.branch_chart import AXES, branch_label, summary_line
from rolltape.outputs.summary import interval, num, role_cells, success_rule_text
from rolltape.pass2.formats import by_suffix
from rolltape.record import Episode, EpisodeKey, Metadata, Results, Run, Video

__all__ = ["build_report"]

MAX_CURVES = 6  # rendered episodes drawn in the cumulative-reward chart
LINE_MAX = 40  # up to this many episodes, the per-episode points are joined by lines



# ------------------------------------------------------------------------------- formatting


def seconds(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return "n/a"
    return f"{x:.1f} s" if x < 120 else f"{x / 60:.1f} min"


def seed_text(seeds: list[int]) -> str:
    if not seeds:
        return "n/a"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]} … {seeds[-1]} (episode i is reset with seed {seeds[0]} + i)"
    return ", ".join(str(s) for s in seeds)


def describe_policy(policy: Mapping[str, Any] | None, fallback: str = "") -> str:
    """A short name for the policy: 'random policy', 'SB3 PPO · ppo.zip', ..."""
    if not policy:
        return fallback or "unknown policy"
    kind = policy.get("kind")
    source = str(policy.get("source") or "")
    if kind == "random":
        return "random policy"
    name = Path(source).name if ("/" in source or "\\" in source) else source
    if kind == "sb3":
        return f"SB3 {policy.get('algo') or ''} · {name}".replace("  ", " ")
    return f"{kind} · {name}" if kind else name or fallback


def plain(value: Any) -> str:
    """A config or metadata value as text: scalars as they are, the rest as compact JSON."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, separators=(", ", ": "))


def _href(target: Path, report: Path) -> str:
    """A URL for ``target`` relative to the folder of ``report``."""
    rel = os.path.relpath(target, report.parent)
    return quote(Path(rel).as_posix())


# ------------------------------------------------------------------------------- sections


def _summary_rows(results: Results) -> list[dict[str, Any]]:
    """One row per role: its name on the page and its cells
    (:func:`rolltape.outputs.summary.role_cells`)."""
    names = {"policy": describe_policy(results.policy, "policy"),
             "baseline": "random baseline"}
    return [{"role": role, "name": names.get(role, role),
             "success_known": s.success_rate is not None, **role_cells(s)}
            for role, s in results.summary.items()]


def _improvement(results: Results) -> dict[str, Any] | None:
    imp = results.improvement_over_baseline
    if not imp or imp.get("mean_diff") is None:
        return None
    lo, hi = imp.get("diff_ci") or (None, None)
    n = imp.get("n_pairs")
    if n == 1:
        verdict = "One pair of episodes: there is no interval to judge by."
        tone = "neutral"
    elif lo is not None and lo > 0:
        verdict = ("The policy earns more than the random baseline on these seeds: the 95% "
                   "interval lies above 0.")
        tone = "good"
    elif hi is not None and hi < 0:
        verdict = ("The policy earns less than the random baseline on these seeds: the 95% "
                   "interval lies below 0.")
        tone = "bad"
    else:
        verdict = ("The 95% interval contains 0: on these seeds the policy cannot be told apart "
                   "from the random baseline.")
        tone = "neutral"
    ratio = imp.get("ratio_of_means")
    return {"diff": num(imp["mean_diff"], sign=True), "ci": interval(imp.get("diff_ci"), sign=True),
            "n": n, "policy_mean": num(imp.get("policy_mean")),
            "baseline_mean": num(imp.get("baseline_mean")), "verdict": verdict, "tone": tone,
            "ratio": f"{ratio:.2f}×" if ratio is not None else None}


def _video_status(v: Video, tolerance: str | None) -> tuple[str, str, str | None]:
    """(css class, headline, detail) for one rendered episode."""
    if v.path is None:
        return "bad", "not rendered", v.error
    verified = v.verified
    checked = v.get("checked")
    if verified is True and isinstance(checked, str) and checked.startswith("observations "):
        # pass 1 and pass 2 drew the images with different GL backends: say what was compared
        return "ok", "verified: replay earned exactly what pass 1 earned", f"Compared: {checked}."
    if verified is True:
        if tolerance:
            return "ok", f"verified: replay matched what pass 1 earned within {tolerance}", None
        return "ok", "verified: replay earned exactly what pass 1 earned", None
    if verified is False:
        where = v.get("divergence_text") or "an unknown step"
        shown = ("The video was drawn from the recorded states, so it shows what pass 1 did."
                 if v.get("mode") == "restore" else
                 "From that step on the video shows the replay, which may differ from what "
                 "pass 1 did; the numbers above come from pass 1.")
        return "bad", f"diverged from pass 1 at {where}", shown
    return "info", "drawn from recorded states (not re-simulated, so not verified)", None


def _camera_text(cameras: list[str] | None, layout: str | None) -> str:
    """Which camera drew a video: 'camera default (env.render()'s view)', 'cameras ...'."""
    names = list(cameras or ()) or ["default"]
    if names == ["default"]:
        return "camera default (the env's own env.render() view)"
    if len(names) == 1:
        return f"camera {names[0]}"
    return f"cameras {' + '.join(names)}" + (f" ({layout})" if layout else "")


def _suite_section(results: Results) -> dict[str, Any] | None:
    """A suite run's per-task table, forest plot and unweighted-mean lines (else None)."""
    suite = results.suite
    if suite is None:
        return None
    from rolltape.outputs.suite_view import forest_plot, headline, mean_rate_text, task_rows

    header, rows = task_rows(suite)
    means = [f"{name}: {text}" for name, entry in [*suite["per_suite"].items(),
                                                  ("overall", suite["overall"])]
             if (text := mean_rate_text(entry))]
    unknown = [f"{t['suite']}/{t['task']}" for t in suite["per_task"] if t["n_unknown"]]
    return {"header": header, "rows": rows, "svg": forest_plot(suite), "means": means,
            "headline": headline(suite),
            "unknown": unknown}


def _videos(run: Run, report: Path, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    episodes = run.results.by_key
    rtol, atol = config.get("rtol") or 0, config.get("atol") or 0
    tolerance = f"rtol={rtol:g}, atol={atol:g}" if (rtol or atol) else None
    videos = run.results.videos
    out = []
    for v in videos:
        cls, headline, detail = _video_status(v, tolerance)
        episode = episodes.get(v.key)
        entry = {"index": v.key.index, "seed": v.key.seed, "status": cls,
                 "anchor": v.key.anchor, "key": v.key,
                 "task": f"{v.key.task_name} · " if v.key.task_name else "",
                 "headline": headline, "detail": detail,
                 "return": num(episode.ret if episode else None),
                 "length": episode.length if episode else None, "frames": v.get("frames"),
                 "backend": v.get("backend"), "mode": v.get("mode"), "src": None, "kind": None,
                 "camera": _camera_text(v.get("cameras") or config.get("cameras"),
                                        config.get("layout")),
                 "hint": v.get("camera_hint"),
                 "missing": False, "preload": "metadata" if len(videos) <= 12 else "none"}
        if v.path:
            target = run.path / v.path
            entry["src"] = _href(target, report)
            entry["name"] = Path(v.path).name
            shown = by_suffix(target)
            entry["kind"] = "img" if shown is not None and shown.shown_as == "img" else "video"
            entry["missing"] = not target.is_file()
        entry["branch"] = _branch(run, episode, report)
        out.append(entry)
    return out


def _branch(run: Run, episode: Episode | None, report: Path) -> dict[str, Any] | None:
    """The episode's ``rolltape branch`` curve (``RUN/branch/<episode>/``), when there is
    one: its picture, its line, and where its axes lie in the picture (fractions, from the
    top-left, as the page's marker of the video's current step counts) over how many steps.
    A damaged branch.json shows nothing."""
    if episode is None or not episode.tape:
        return None
    folder = run.path / "branch" / branch_label(episode.tape)
    try:
        record = json.loads((folder / "branch.json").read_text())
        line = summary_line(record)
        steps = max(int(record["episode"]["length"]), 1)  # the chart's x axis: 0 to steps
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not (folder / "branch.png").is_file():
        return None
    left, right, bottom, top = AXES
    return {"src": _href(folder / "branch.png", report), "line": line, "steps": steps,
            "x0": left, "x1": right, "y0": round(1 - top, 4), "y1": round(1 - bottom, 4)}


def _drawn(results: Results, task: tuple[Any, Any]) -> tuple[list[EpisodeKey], str]:
    """The policy episodes of ``task`` whose cumulative reward is drawn, and in words which:
    the rendered ones, else the best, median and worst."""
    rendered = [v.key for v in results.videos if v.path and v.key.task_key == task]
    if rendered:
        what = "each rendered episode"
        if len(rendered) > MAX_CURVES:
            what = f"the first {MAX_CURVES} of the {len(rendered)} rendered episodes"
        return rendered[:MAX_CURVES], what
    finite = [e for e in results.episodes if e.key.task_key == task and e.ret is not None]
    order = sorted(finite, key=lambda e: (e.ret, e.key.index))
    picked = {order[-1].key, order[(len(order) - 1) // 2].key, order[0].key} if order else set()
    return sorted(picked, key=lambda k: k.index), \
        "the best, median and worst policy episodes (none was rendered)"


def _cumulative_curves(run: Run, task: tuple[Any, Any]) -> tuple[list[plots.Series], str]:
    """Cumulative reward of the drawn episodes of ``task`` (and the baseline on the same
    seeds), each episode found by its full key."""
    import numpy as np

    from rolltape.tape import Tape

    episodes = run.results.by_key
    keys, what = _drawn(run.results, task)
    series: list[plots.Series] = []
    skipped = []
    for k, key in enumerate(keys):
        color = plots.PALETTE[k % len(plots.PALETTE)]
        for episode, dash in ((episodes.get(key), False),
                              (episodes.get(key.counterpart("baseline")), True)):
            if episode is None:
                continue
            who = f"{episode.key.role} {episode.key.label}"
            try:
                tape = Tape.load(run.tape_path(episode))
            except (UsageError, OSError, KeyError, ValueError):
                skipped.append(who)
                continue
            ys = np.concatenate([[0.0], np.cumsum(tape.rewards, dtype=float)])
            if not np.isfinite(ys).all():
                skipped.append(f"{who} (rewards not finite)")
                continue
            label = (f"episode {key.index} · seed {key.seed}" if not dash
                     else f"random, seed {key.seed}")
            series.append(plots.Series(
                label, np.arange(ys.size).tolist(), ys.tolist(), color, dash=dash,
                markers=False, key=episode.key.anchor + ("-baseline" if dash else ""),
                end_tip=f"{who}: return {num(float(ys[-1]))} after {tape.length} steps"))
    if skipped:
        what += f"; tapes missing or unreadable: {', '.join(skipped)}"
    return series, what


def _charts(run: Run) -> list[dict[str, str]]:
    """Return per episode, distribution of returns, episode length and cumulative reward:
    once for one env; for a suite, once per task, each task on its own axes (tasks have
    their own reward scales and lengths)."""
    results = run.results
    charts = []
    for task in results.tasks:
        charts += _task_charts(run, task)
    return charts


def _returns(episodes: list[Episode]) -> list[float]:
    """The returns of episodes that have a finite one (the charts draw only those)."""
    return [r for e in episodes if (r := e.ret) is not None]


def _task_charts(run: Run, task: tuple[Any, Any]) -> list[dict[str, str]]:
    results = run.results
    name = f"{task[0]}/{task[1]}" if task[0] is not None else None
    uid = "" if name is None else "-" + "-".join(str(t) for t in task)
    title = name or results.env_id

    # An episode whose return is not a finite number (null in results.json) is not plotted.
    def mine(episodes: tuple[Episode, ...]) -> list[Episode]:
        return [e for e in episodes if e.key.task_key == task and e.ret is not None]

    policy, baseline = mine(results.episodes), mine(results.baseline)
    roles = [("policy", policy)] + ([("baseline", baseline)] if baseline else [])

    def tips(episodes: list[Episode], role: str) -> list[str]:
        return [f"{role} {e.key.label}: return {num(e.ret)}" for e in episodes]

    charts = []
    # Lines between episodes guide the eye across a few; across many they are only noise.
    series = [plots.Series(role, [e.key.index for e in eps], _returns(eps),
                           plots.ROLE_COLORS[role], tips=tips(eps, role),
                           line=len(eps) <= LINE_MAX, key=f"{role}{uid}")
              for role, eps in roles]
    charts.append({
        "id": f"returns{uid}", "title": f"{name}: return per episode" if name
        else "Return per episode",
        "caption": "Return of every episode" + (
            "; episode i of both roles was reset with the same seed, so points above each "
            "other started alike." if baseline else "."),
        "svg": plots.line_chart(series,
                                title=f"{title}: return per episode",
                                desc=f"Episode return for {', '.join(r for r, _ in roles)}, "
                                     f"one point per episode ({len(policy)} episodes).",
                                xlabel=f"episode (seed {results.seed} + episode)",
                                ylabel="return", integer_x=True, uid=f"returns{uid}")})
    strips = []
    for role, eps in roles:
        s = results.summary.get(role)
        if s is None:
            continue
        if name is not None:  # the run's summary pools tasks: this task's own IQM here
            from rolltape.record import Summary

            s = Summary.of(eps)
        strips.append(plots.Strip(role, _returns(eps), plots.ROLE_COLORS[role],
                                  tips=tips(eps, role), center=s.iqm,
                                  interval=s.iqm_ci, key=f"{role}{uid}"))
    charts.append({
        "id": f"distribution{uid}", "title": f"{name}: distribution of returns" if name
        else "Distribution of returns",
        "caption": "Every episode's return as a dot; the diamond is the interquartile mean "
                   "and the bar its bootstrap 95% confidence interval.",
        "svg": plots.strip_chart(strips, title=f"{title}: distribution of returns",
                                 desc="Strip plot of episode returns per role with the IQM "
                                      "and its 95% bootstrap interval.",
                                 xlabel="return", uid=f"distribution{uid}")})
    ends = [plots.Series(role, [e.key.index for e in eps], [e.length for e in eps],
                         plots.ROLE_COLORS[role], tips=[
                             f"{role} {e.key.label}: {e.length} steps, "
                             f"{'terminated' if e.terminated else 'truncated'}" for e in eps],
                         hollow=[not e.terminated for e in eps],
                         line=len(eps) <= LINE_MAX, key=f"{role}{uid}")
            for role, eps in roles]
    charts.append({
        "id": f"lengths{uid}", "title": f"{name}: episode length" if name else "Episode length",
        "caption": "Steps per episode. A filled dot ended by termination (the env said the "
                   "episode is over); a ring was truncated (time limit).",
        "svg": plots.line_chart(ends, title=f"{title}: episode length",
                                desc="Number of steps in each episode, per role; filled "
                                     "dots terminated, rings were truncated.",
                                xlabel="episode", ylabel="steps", integer_x=True,
                                integer_y=True, uid=f"lengths{uid}",
                                extra_legend=[("terminated", plots.MUTED, False, "dot"),
                                              ("truncated", plots.MUTED, False, "ring")])})
    curves, what = _cumulative_curves(run, task)
    charts.append({
        "id": f"cumulative{uid}", "title": f"{name}: cumulative reward" if name
        else "Cumulative reward",
        "caption": f"Reward summed over the steps of {what}, read from the tapes"
                   + ("; dashed: the random baseline on the same seed." if baseline else "."),
        "svg": plots.line_chart(curves, title=f"{title}: cumulative reward per step",
                                desc=f"Cumulative reward over steps for {what}.",
                                xlabel="step", ylabel="cumulative reward", integer_x=True,
                                uid=f"cumulative{uid}")})
    return charts


def _episode_table(results: Results, videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    episodes = results.by_key
    shown = {v["key"]: v for v in videos if v.get("src")}
    rows = []
    for e in results.episodes:
        b = episodes.get(e.key.counterpart("baseline"))
        success = e.success(results.rule_of(e.key.task_key))
        rows.append({
            "index": e.key.index, "seed": e.key.seed, "return": num(e.ret),
            "task": f"{e.key.task_name} · " if e.key.task_name else "", "anchor": e.key.anchor,
            "baseline": num(b.ret) if b else None,
            "diff": num(e.ret - b.ret, sign=True)
            if b and e.ret is not None and b.ret is not None else None,
            "length": e.length, "end": "terminated" if e.terminated else "truncated",
            "success": "n/a" if success is None else ("yes" if success else "no"),
            "success_once": "n/a" if e.success_once is None
            else ("yes" if e.success_once else "no"),
            "video": shown.get(e.key, {}).get("src"),
        })
    return rows


def _seeds(meta: Mapping[str, Any], results: Results) -> list[tuple[str, str]]:
    """The seeds of the run as provenance lines: one line for one env, one per task."""
    seeds = meta.get("seeds") or {}
    per_task = seeds.get("per_task")
    if isinstance(per_task, dict) and per_task:
        return [(f"{task}: {seed_text(list(range(lo, hi + 1)))}", "")
                for task, (lo, hi) in per_task.items()]
    listed = seeds.get("episodes") or [e.key.seed for e in results.episodes]
    return [(seed_text(listed), "")]


def _provenance(metadata: Metadata | None, results: Results,
                run_finished: str | None) -> dict[str, Any] | None:
    if metadata is None:
        return None
    meta = metadata.facts
    policy = meta.get("policy") or {}
    command = meta.get("command")
    render = meta.get("render") or {}
    env = meta.get("env") or results.env or {}
    sha = meta.get("checkpoint_sha256") or policy.get("sha256")
    vn_sha = meta.get("vecnormalize_sha256") or policy.get("vecnormalize_sha256")
    # A random policy samples its actions: "deterministic" says nothing about it.
    hidden = ("kind", "source", "sha256", "vecnormalize", "vecnormalize_sha256", "algo",
              "wrappers") + \
        (("deterministic",) if policy.get("kind") == "random" else ())
    details = ", ".join(f"{k} {plain(v)}" for k, v in policy.items()
                        if k not in hidden and v is not None)
    checkpoint: list[tuple[str, str]] = (
        [(str(policy.get("source")), "code"), (f"sha256 {sha}", "code")] if sha
        else [(f"none ({describe_policy(policy)} has no checkpoint file)", "")])
    stats_file: list[tuple[str, str]] = (
        [(str(policy.get("vecnormalize")), "code"), (f"sha256 {vn_sha}", "code")] if vn_sha
        else [("none (no VecNormalize statistics were used)", "")])
    facts: list[tuple[str, list[tuple[str, str]]]] = [
        ("Command", [(shlex.join(str(c) for c in command) if isinstance(command, list)
                      else plain(command), "code")]),
        ("Working directory", [(plain(meta.get("cwd")), "code")]),
        ("Run finished", [(run_finished or "n/a", "")]),
        ("Policy", [(describe_policy(policy), "")] + ([(details, "muted")] if details else [])),
        ("Policy saw", [(" + ".join(map(str, policy["wrappers"])) + " (over the base env "
                         "the tapes record)", "code")] if policy.get("wrappers")
         else [("the env itself (no policy-side wrappers)", "")]),
        ("Checkpoint", checkpoint),
        ("VecNormalize statistics", stats_file),
        ("Baseline", [(describe_policy(meta.get("baseline"), "none"), "")]),
        ("Environment", [(str(env.get("id", results.env_id)), "")]
         + [(f"{k} {plain(env[k])}", "code") for k in ("kwargs", "max_episode_steps")
            if env.get(k)]
         + ([(f"suite manifest {(meta.get('suite') or {}).get('source')}", "")]
            if meta.get("suite") else [])),
        ("Seeds", _seeds(meta, results)),
        ("GL backend used", [(", ".join(render.get("backend_used") or []) or "none (no video)",
                              "")]),
        ("GL backends tried", [(", ".join(render.get("backends_tried") or []) or "—", "")]),
        ("Render failures", [(f"{b}: {why}", "") for b, why in render.get("failures") or []]
         or [("none", "")]),
        ("Resumed", [(plain(meta.get("resumed")), "")]),
        ("Environment variables", [(", ".join(
            f"{k}={v if v is not None else '(unset)'}"
            for k, v in (meta.get("environment") or {}).items()) or "—", "code")]),
    ]
    platform = meta.get("platform") or {}
    platform_text = " ".join(str(platform.get(k)) for k in ("system", "release", "machine")
                             if platform.get(k))
    if platform.get("cpu_count"):
        platform_text += f", {platform['cpu_count']} CPUs"
    if platform.get("processor"):
        platform_text += f" ({platform['processor']})"
    facts.insert(3, ("Platform", [(platform_text or "n/a", "")]))
    timings = [(k.removesuffix("_s").replace("pass", "pass "), seconds(v))
               for k, v in (meta.get("timings") or {}).items()]
    versions = [(k, v or "not installed") for k, v in (meta.get("versions") or {}).items()]
    config = [(k, plain(v) + (" (not used: a random policy samples its actions)"
                               if k == "deterministic" and policy.get("kind") == "random"
                               else ""))
              for k, v in metadata.config.items()]
    return {"facts": facts, "timings": timings, "versions": versions, "config": config}


# ------------------------------------------------------------------------------- the page


@lru_cache(maxsize=1)
def template_environment() -> Any:
    """The Jinja environment of rolltape's pages (outputs/templates): escaped, strict about
    undefined names, made once per process. Every page (run report, comparison, diff,
    latency, recipes, training timeline) is rendered from it by :func:`render_page`."""
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("rolltape.outputs", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def _viewer_on_disk(root: Path) -> dict[str, Any] | None:
    """The 3-D replay in RUN/viewer/ (written by eval or `rolltape view`), or None."""
    try:
        manifest = json.loads((root / "viewer" / "manifest.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    note = manifest.get("note") if isinstance(manifest, dict) else None
    return {"href": "viewer/index.html", "note": note}


def _final_folder(root: Path) -> Path:
    """Where the run lives once finished: eval builds it in ``.NAME.partial`` beside its
    place (:class:`rolltape.outputs.artifacts.RunDir`) and writes the report there before
    moving it."""
    name = root.name
    if name.startswith(".") and name.endswith(".partial") and len(name) > len("..partial"):
        return root.with_name(name[1:-len(".partial")])
    return root


def _viewer(viewer: dict[str, Any] | None, root: Path, report: Path) -> dict[str, Any] | None:
    if viewer is None:
        return None
    href = viewer.get("href")
    if href and not urlsplit(str(href)).scheme and not str(href).startswith("/"):
        href = _href(root / str(href), report)  # given relative to the run folder
    note = viewer.get("note")
    if not href and not note:
        note = "3-D replay unavailable for this run."
    # A browser loads neither ES modules nor WebAssembly from a file:// page, so the
    # viewer needs a server; the page says how to start one (it runs no script to check).
    command = shlex.join(["rolltape", "view", str(_final_folder(root.absolute()))])
    return {"href": href, "note": note, "command": command}


def build_report(run: Run | str | os.PathLike[str], *,
                 out: str | os.PathLike[str] | None = None,
                 viewer: dict[str, Any] | None = None) -> Path:
    """Write the run's HTML report (``RUN/report.html`` unless ``out``) and return its path.

    ``run`` is a :class:`rolltape.record.Run` (what ``evaluate`` returns) or its folder.
    ``viewer`` links an interactive 3-D replay: ``{"href": "viewer/index.html", "note": None}``
    (``href`` relative to the run folder), or ``{"href": None, "note": "why not"}`` to say
    why there is none. Without it, the replay in ``RUN/viewer/`` is linked when there is one
    (so rebuilding the report keeps what eval wrote); otherwise there is no viewer section.

    Raises:
        UsageError: ``run`` is not a run (no results.json, not JSON, unknown schema), or
            the report cannot be written; nothing is written then.
    """
    if not isinstance(run, Run):
        run = Run.load(run)
    root, results, meta = run.path, run.results, run.metadata
    report = Path(out) if out is not None else root / "report.html"
    if report.is_dir():
        report = report / "report.html"
    config = meta.config if meta is not None else {}
    summary_rows = _summary_rows(results)
    videos = _videos(run, report, config)
    policy_name = describe_policy(results.policy, str(config.get("policy") or "policy"))
    seeds = sorted({e.key.seed for e in results.episodes})
    finished = None
    if (root / "metadata.json").is_file():
        finished = time.strftime("%Y-%m-%d %H:%M:%S %Z",
                                 time.localtime((root / "metadata.json").stat().st_mtime))
    verified = sum(1 for v in results.videos if v.verified is True)
    diverged = len(results.diverged)
    policy_desc = results.policy or {}
    random_policy = policy_desc.get("kind") == "random"
    context = {
        "env_id": results.env_id,
        "policy_name": policy_name,
        "deterministic": None if random_policy
        else policy_desc.get("deterministic", config.get("deterministic")),
        "random_policy": random_policy,
        "episodes": results.n_episodes,
        "seeds": f"{seeds[0]}–{seeds[-1]}" + (" per task" if results.is_suite else "")
        if len(seeds) > 1 else str(seeds[0]) if seeds else "none (no episode finished)",
        "has_baseline": bool(results.baseline),
        "mjwarp": config.get("simulator") == "mjwarp",
        "summary": summary_rows,
        "any_success": any(r["success_known"] for r in summary_rows),
        "success_rule": success_rule_text(results.success_rule),
        "improvement": _improvement(results),
        "charts": _charts(run),
        "suite": _suite_section(results),
        "videos": videos,
        "branch_marker": any(v["branch"] and v["kind"] == "video" and v["src"]
                             and not v["missing"] for v in videos),
        "verified": verified, "diverged": diverged,
        "episode_rows": _episode_table(results, videos),
        "warnings": list(results.warnings) or (meta.get("warnings") if meta else None) or [],
        "provenance": _provenance(meta, results, finished),
        "viewer": _viewer(viewer if viewer is not None else _viewer_on_disk(root), root, report),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    html = render_page("report.html.j2", **context)
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        return write_text(report, html)
    except OSError as exc:
        import errno

        fix = ("free some space and run `rolltape report` again" if exc.errno == errno.ENOSPC
               else "choose a writable --out")
        raise UsageError(f"Cannot write the report to '{report}' ({exc.strerror}); "
                         f"{fix}.") from None


def render_page(template: str, **context: Any) -> str:
    """The HTML of one of rolltape's page ``template``s filled with ``context``, plus the
    ``rolltape_version`` every page's footer names."""
    from rolltape import __version__

    return template_environment().get_template(template).render(rolltape_version=__version__,
                                                                **context)
