"""``rolltape report RUN``: one self-contained HTML page for a finished run.

The page is read straight from the run folder: ``results.json`` for every number (all of
them from pass 1), ``metadata.json`` for provenance, the tapes of the rendered episodes for
their cumulative reward, and ``videos/`` for the players. The summary's cells come from
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
from typing import Any
from urllib.parse import quote, urlsplit

from rolltape.errors import UsageError
from rolltape.files import write_text
from rolltape.outputs import plots
from rolltape.outputs.artifacts import RESULTS_SCHEMA_VERSION
from rolltape.outputs.summary import interval, num, role_cells

__all__ = ["build_report", "load_run"]

MAX_CURVES = 6  # rendered episodes drawn in the cumulative-reward chart
LINE_MAX = 40  # up to this many episodes, the per-episode points are joined by lines

IMAGE_TYPES = {".gif"}


# ------------------------------------------------------------------------------- loading


def load_run(run_dir: str | os.PathLike[str]) -> tuple[Path, dict[str, Any], dict[str, Any] | None]:
    """(folder, results, metadata) of a run; a folder that is not a run is a UsageError.

    ``metadata`` is None when metadata.json is missing or unreadable (the numbers still
    stand on their own).
    """
    root = Path(run_dir)
    if root.is_file() and root.name == "results.json":
        root = root.parent
    hint = "give the folder that `rolltape eval` wrote."
    if not root.is_dir():
        raise UsageError(f"'{root}' is not a rolltape run (no such folder); {hint}")
    path = root / "results.json"
    if not path.is_file():
        raise UsageError(f"'{root}' is not a rolltape run (no results.json); {hint}")
    try:
        results = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "it is not valid JSON"
        raise UsageError(f"'{root}' is not a rolltape run (results.json cannot be read: "
                         f"{why}); {hint}") from None
    if not isinstance(results, dict) or "schema_version" not in results:
        raise UsageError(f"'{root}' is not a rolltape run (results.json has no schema_version); "
                         f"{hint}")
    if results["schema_version"] != RESULTS_SCHEMA_VERSION:
        raise UsageError(f"'{root}' is not a rolltape run this version can read (results.json "
                         f"schema {results['schema_version']!r}, this rolltape reads schema "
                         f"{RESULTS_SCHEMA_VERSION}); report it with the rolltape that wrote it.")
    missing = [k for k in ("env_id", "summary", "episodes_rows") if k not in results]
    if missing or not results["episodes_rows"] or "policy" not in results["summary"]:
        what = ", ".join(missing) or "episodes"
        raise UsageError(f"'{root}' is not a complete rolltape run (results.json lacks {what}); "
                         f"{hint}")
    metadata = None
    try:
        loaded = json.loads((root / "metadata.json").read_text())
        metadata = loaded if isinstance(loaded, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        pass
    return root, results, metadata


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


def describe_policy(policy: dict[str, Any] | None, fallback: str = "") -> str:
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


def _summary_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per role: its name on the page and its cells
    (:func:`rolltape.outputs.summary.role_cells`)."""
    names = {"policy": describe_policy(results.get("policy"), "policy"),
             "baseline": "random baseline"}
    return [{"role": role, "name": names.get(role, role),
             "success_known": s.get("success_rate") is not None, **role_cells(results, role)}
            for role, s in results["summary"].items()]


def _improvement(results: dict[str, Any]) -> dict[str, Any] | None:
    imp = results.get("improvement_over_baseline")
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


def _video_status(v: dict[str, Any], tolerance: str | None) -> tuple[str, str, str | None]:
    """(css class, headline, detail) for one rendered episode."""
    if v.get("path") is None:
        return "bad", "not rendered", v.get("error")
    verified = v.get("verified")
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


def _episode_key(r: dict[str, Any]) -> tuple[Any, Any, Any]:
    """An episode in a run: (suite, task, index); suite and task are None for one env."""
    return (r.get("suite"), r.get("task"), r.get("index"))


def _anchor(r: dict[str, Any]) -> str:
    """'3' for one env's episode 3, 'mazes-umaze-3' for a suite's (a page id)."""
    return "-".join(str(k) for k in _episode_key(r) if k is not None)


def _suite_section(results: dict[str, Any]) -> dict[str, Any] | None:
    """A suite run's per-task table, forest plot and unweighted-mean lines (else None)."""
    suite = results.get("suite")
    if not suite:
        return None
    from rolltape.outputs.suite_view import forest_plot, mean_rate_text, task_rows

    header, rows = task_rows(suite)
    means = [f"{name}: {text}" for name, entry in [*suite["per_suite"].items(),
                                                  ("overall", suite["overall"])]
             if (text := mean_rate_text(entry))]
    unknown = [f"{t['suite']}/{t['task']}" for t in suite["per_task"] if t["n_unknown"]]
    return {"header": header, "rows": rows, "svg": forest_plot(suite), "means": means,
            "unknown": unknown}


def _videos(root: Path, report: Path, results: dict[str, Any],
            config: dict[str, Any]) -> list[dict[str, Any]]:
    rows = {_episode_key(r): r for r in results.get("episodes_rows") or []}
    rtol, atol = config.get("rtol") or 0, config.get("atol") or 0
    tolerance = f"rtol={rtol:g}, atol={atol:g}" if (rtol or atol) else None
    videos = results.get("videos") or []
    out = []
    for v in videos:
        cls, headline, detail = _video_status(v, tolerance)
        row = rows.get(_episode_key(v), {})
        entry = {"index": v.get("index"), "seed": v.get("seed"), "status": cls,
                 "anchor": _anchor(v),
                 "task": f"{v['suite']}/{v['task']} · " if v.get("suite") else "",
                 "headline": headline, "detail": detail, "return": num(row.get("return")),
                 "length": row.get("length"), "frames": v.get("frames"),
                 "backend": v.get("backend"), "mode": v.get("mode"), "src": None, "kind": None,
                 "camera": _camera_text(v.get("cameras") or config.get("cameras"),
                                        config.get("layout")),
                 "hint": v.get("camera_hint"),
                 "missing": False, "preload": "metadata" if len(videos) <= 12 else "none"}
        if v.get("path"):
            target = root / v["path"]
            entry["src"] = _href(target, report)
            entry["name"] = Path(v["path"]).name
            suffix = target.suffix.lower()
            entry["kind"] = "img" if suffix in IMAGE_TYPES else "video"
            entry["missing"] = not target.is_file()
        out.append(entry)
    return out


def _cumulative_curves(root: Path, results: dict[str, Any]) -> tuple[list[plots.Series], str]:
    """Cumulative reward of the rendered episodes (and the baseline on the same seeds)."""
    import numpy as np

    from rolltape.tape import Tape

    policy_rows = [r for r in results.get("episodes_rows") or [] if r["return"] is not None]
    baseline_rows = {r.get("index"): r for r in results.get("baseline_rows") or []}
    rendered = [v.get("index") for v in results.get("videos") or [] if v.get("path")]
    if rendered:
        picked = rendered[:MAX_CURVES]
        what = "each rendered episode"
        if len(rendered) > MAX_CURVES:
            what = f"the first {MAX_CURVES} of the {len(rendered)} rendered episodes"
    else:  # no videos: show the best, median and worst episodes instead
        order = sorted(range(len(policy_rows)), key=lambda i: (policy_rows[i]["return"], i))
        picked = sorted({order[-1], order[(len(order) - 1) // 2], order[0]}) if order else []
        what = "the best, median and worst policy episodes (none was rendered)"
    by_index = {r.get("index"): r for r in policy_rows}
    series: list[plots.Series] = []
    skipped = []
    for k, index in enumerate(picked):
        color = plots.PALETTE[k % len(plots.PALETTE)]
        for role, row, dash in (("policy", by_index.get(index), False),
                                ("baseline", baseline_rows.get(index), True)):
            if row is None:
                continue
            try:
                tape = Tape.load(root / row["tape"])
            except (UsageError, OSError, KeyError, ValueError):
                skipped.append(f"{role} episode {index}")
                continue
            ys = np.concatenate([[0.0], np.cumsum(tape.rewards, dtype=float)])
            if not np.isfinite(ys).all():
                skipped.append(f"{role} episode {index} (rewards not finite)")
                continue
            xs = np.arange(ys.size)
            label = (f"episode {index} · seed {row.get('seed')}" if role == "policy"
                     else f"random, seed {row.get('seed')}")
            series.append(plots.Series(
                label, xs.tolist(), ys.tolist(), color, dash=dash, markers=False,
                end_tip=f"{role} episode {index} (seed {row.get('seed')}): return "
                        f"{num(float(ys[-1]))} after {tape.length} steps"))
    if skipped:
        what += f"; tapes missing or unreadable: {', '.join(skipped)}"
    return series, what


def _charts(root: Path, results: dict[str, Any]) -> list[dict[str, str]]:
    # An episode whose return is not a finite number (null in results.json) is not plotted.
    policy = [r for r in results.get("episodes_rows") or [] if r["return"] is not None]
    baseline = [r for r in results.get("baseline_rows") or [] if r["return"] is not None]
    summary = results["summary"]
    roles = [("policy", policy)] + ([("baseline", baseline)] if baseline else [])
    env = results.get("env_id", "")

    def tips(rows: list[dict[str, Any]], role: str) -> list[str]:
        return [f"{role} episode {r['index']} (seed {r['seed']}): return {num(r['return'])}"
                for r in rows]

    charts = []
    # Lines between episodes guide the eye across a few; across many they are only noise.
    series = [plots.Series(role, [r["index"] for r in rows], [r["return"] for r in rows],
                           plots.ROLE_COLORS[role], tips=tips(rows, role),
                           line=len(rows) <= LINE_MAX)
              for role, rows in roles]
    charts.append({
        "id": "returns", "title": "Return per episode",
        "caption": "Return of every episode" + (
            "; episode i of both roles was reset with the same seed, so points above each "
            "other started alike." if baseline else "."),
        "svg": plots.line_chart(series,
                                title=f"{env}: return per episode",
                                desc=f"Episode return for {', '.join(r for r, _ in roles)}, "
                                     f"one point per episode ({len(policy)} episodes).",
                                xlabel=f"episode (seed {results.get('seed', 0)} + episode)",
                                ylabel="return", integer_x=True, uid="returns")})
    strips = [plots.Strip(role, [r["return"] for r in rows], plots.ROLE_COLORS[role],
                          tips=tips(rows, role), center=summary[role].get("iqm"),
                          interval=tuple(summary[role]["iqm_ci"])
                          if summary[role].get("iqm_ci") else None)
              for role, rows in roles if role in summary]
    charts.append({
        "id": "distribution", "title": "Distribution of returns",
        "caption": "Every episode's return as a dot; the diamond is the interquartile mean "
                   "and the bar its bootstrap 95% confidence interval.",
        "svg": plots.strip_chart(strips, title=f"{env}: distribution of returns",
                                 desc="Strip plot of episode returns per role with the IQM "
                                      "and its 95% bootstrap interval.",
                                 xlabel="return", uid="distribution")})
    ends = [plots.Series(role, [r["index"] for r in rows], [r["length"] for r in rows],
                         plots.ROLE_COLORS[role], tips=[
                             f"{role} episode {r['index']} (seed {r['seed']}): {r['length']} "
                             f"steps, {'terminated' if r.get('terminated') else 'truncated'}"
                             for r in rows],
                         hollow=[not r.get("terminated") for r in rows],
                         line=len(rows) <= LINE_MAX)
            for role, rows in roles]
    charts.append({
        "id": "lengths", "title": "Episode length",
        "caption": "Steps per episode. A filled dot ended by termination (the env said the "
                   "episode is over); a ring was truncated (time limit).",
        "svg": plots.line_chart(ends, title=f"{env}: episode length",
                                desc="Number of steps in each episode, per role; filled "
                                     "dots terminated, rings were truncated.",
                                xlabel="episode", ylabel="steps", integer_x=True,
                                integer_y=True,
                                uid="lengths",
                                extra_legend=[("terminated", plots.MUTED, False, "dot"),
                                              ("truncated", plots.MUTED, False, "ring")])})
    curves, what = _cumulative_curves(root, results)
    charts.append({
        "id": "cumulative", "title": "Cumulative reward",
        "caption": f"Reward summed over the steps of {what}, read from the tapes"
                   + ("; dashed: the random baseline on the same seed." if baseline else "."),
        "svg": plots.line_chart(curves, title=f"{env}: cumulative reward per step",
                                desc=f"Cumulative reward over steps for {what}.",
                                xlabel="step", ylabel="cumulative reward", integer_x=True,
                                uid="cumulative")})
    return charts


def _episode_table(results: dict[str, Any], videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    baseline = {_episode_key(r): r for r in results.get("baseline_rows") or []}
    shown = {(v["task"], v["index"]): v for v in videos if v.get("src")}
    rows = []
    for r in results.get("episodes_rows") or []:
        b = baseline.get(_episode_key(r))
        task = f"{r['suite']}/{r['task']} · " if r.get("suite") else ""
        rows.append({
            "index": r.get("index"), "seed": r.get("seed"), "return": num(r.get("return")),
            "task": task, "anchor": _anchor(r),
            "baseline": num(b.get("return")) if b else None,
            "diff": num(r["return"] - b["return"], sign=True)
            if b and r["return"] is not None and b["return"] is not None else None,
            "length": r.get("length"),
            "end": "terminated" if r.get("terminated") else "truncated",
            "success": "n/a" if r.get("success") is None else ("yes" if r["success"] else "no"),
            "video": shown.get((task, r.get("index")), {}).get("src"),
        })
    return rows


def _provenance(meta: dict[str, Any] | None, results: dict[str, Any],
                run_finished: str | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    policy = meta.get("policy") or {}
    command = meta.get("command")
    render = meta.get("render") or {}
    seeds = (meta.get("seeds") or {}).get("episodes") or []
    env = meta.get("env") or results.get("env") or {}
    sha = meta.get("checkpoint_sha256") or policy.get("sha256")
    vn_sha = meta.get("vecnormalize_sha256") or policy.get("vecnormalize_sha256")
    details = ", ".join(f"{k} {plain(v)}" for k, v in policy.items()
                        if k not in ("kind", "source", "sha256", "vecnormalize",
                                     "vecnormalize_sha256", "algo") and v is not None)
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
        ("Checkpoint", checkpoint),
        ("VecNormalize statistics", stats_file),
        ("Baseline", [(describe_policy(meta.get("baseline"), "none"), "")]),
        ("Environment", [(str(env.get("id", results.get("env_id"))), "")]
         + [(f"{k} {plain(env[k])}", "code") for k in ("kwargs", "max_episode_steps")
            if env.get(k)]),
        ("Seeds", [(seed_text(seeds), "")]),
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
    config = [(k, plain(v)) for k, v in (meta.get("config") or {}).items()]
    return {"facts": facts, "timings": timings, "versions": versions, "config": config}


# ------------------------------------------------------------------------------- the page


@lru_cache(maxsize=1)
def _environment() -> Any:
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


def build_report(run_dir: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
                 viewer: dict[str, Any] | None = None) -> Path:
    """Write the run's HTML report (``RUN/report.html`` unless ``out``) and return its path.

    ``viewer`` links an interactive 3-D replay: ``{"href": "viewer/index.html", "note": None}``
    (``href`` relative to the run folder), or ``{"href": None, "note": "why not"}`` to say
    why there is none. Without it, the replay in ``RUN/viewer/`` is linked when there is one
    (so rebuilding the report keeps what eval wrote); otherwise there is no viewer section.

    Raises:
        UsageError: ``run_dir`` is not a run (no results.json, not JSON, unknown schema), or
            the report cannot be written; nothing is written then.
    """
    root, results, meta = load_run(run_dir)
    report = Path(out) if out is not None else root / "report.html"
    if report.is_dir():
        report = report / "report.html"
    config = (meta or {}).get("config") or {}
    summary_rows = _summary_rows(results)
    videos = _videos(root, report, results, config)
    policy_name = describe_policy(results.get("policy"), str(config.get("policy") or "policy"))
    seeds = [r.get("seed") for r in results.get("episodes_rows") or []]
    finished = None
    if (root / "metadata.json").is_file():
        finished = time.strftime("%Y-%m-%d %H:%M:%S %Z",
                                 time.localtime((root / "metadata.json").stat().st_mtime))
    verified = sum(1 for v in results.get("videos") or [] if v.get("verified") is True)
    diverged = sum(1 for v in results.get("videos") or [] if v.get("verified") is False)
    policy_desc = results.get("policy") or {}
    context = {
        "env_id": results.get("env_id"),
        "policy_name": policy_name,
        "deterministic": policy_desc.get("deterministic", config.get("deterministic")),
        "episodes": results.get("episodes", len(seeds)),
        "seeds": f"{seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else str(seeds[0]),
        "has_baseline": bool(results.get("baseline_rows")),
        "summary": summary_rows,
        "any_success": any(r["success_known"] for r in summary_rows),
        "improvement": _improvement(results),
        "charts": _charts(root, results),
        "suite": _suite_section(results),
        "videos": videos,
        "verified": verified, "diverged": diverged,
        "episode_rows": _episode_table(results, videos),
        "warnings": (meta or {}).get("warnings") or results.get("warnings") or [],
        "provenance": _provenance(meta, results, finished),
        "viewer": _viewer(viewer if viewer is not None else _viewer_on_disk(root), root, report),
        "rolltape_version": _version(),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    html = _environment().get_template("report.html.j2").render(**context)
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        return write_text(report, html)
    except OSError as exc:
        raise UsageError(f"Cannot write the report to '{report}' ({exc.strerror}); choose a "
                         "writable --out.") from None


def _version() -> str:
    from rolltape import __version__

    return __version__
