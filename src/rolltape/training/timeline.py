"""The page of a training run: every training episode's return and the evaluations (mean
with its 95% bootstrap interval) against training steps, the recorded episodes placed on
that curve and played inline as verified videos, the evaluation runs linked; and
``timeline.png``, the same picture for a notebook or a paper.

May import: files, outputs, matplotlib (inside functions). Never: SB3, torch, pass 1, pass 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence


def draw_timeline(evaluations: Sequence[dict[str, Any]], recorded: Sequence[dict[str, Any]],
                  path: Path) -> str:
    """Draw ``path`` (a PNG); returns its file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    points = [e for e in evaluations if e.get("mean_reward") is not None]
    if points:
        steps = [e["step"] for e in points]
        means = [e["mean_reward"] for e in points]
        ax.plot(steps, means, "o-", color="#1565c0", label="evaluation mean return")
        with_ci = [e for e in points if e.get("ci")]
        if with_ci:
            ax.fill_between([e["step"] for e in with_ci], [e["ci"][0] for e in with_ci],
                            [e["ci"][1] for e in with_ci], color="#1565c0", alpha=0.2,
                            label="95% bootstrap interval")
    for k, row in enumerate(recorded):
        ax.axvline(row["step"], color="#ef6c00", alpha=0.6, linewidth=1,
                   label="recorded episode (tape + video)" if k == 0 else None)
        if row.get("monitor_return") is not None:
            ax.plot(row["step"], row["monitor_return"], "v", color="#ef6c00")
    ax.set_xlabel("training steps")
    ax.set_ylabel("episode return")
    ax.set_title("training timeline", loc="left", fontsize=10)
    if points or recorded:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    from rolltape.files import atomic_file

    with atomic_file(path) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path.name


def timeline_report(out: Path, picture: str | None, evaluations: Sequence[dict[str, Any]],
                    recorded: Sequence[dict[str, Any]],
                    episodes: Sequence[tuple[int, float, int]] = (), *, steps: int = 0,
                    title: str = "Training run") -> str:
    """The training page, in the look of a run's report: every training episode's return
    (SB3's Monitor) against steps, the evaluations with their 95% intervals, the recorded
    episodes on that curve (each a link to its verified video, played inline below), and
    the evaluation runs linked. ``episodes`` are (step, return, length) as they ended."""
    from rolltape.outputs import plots
    from rolltape.outputs.report import render_page
    from rolltape.outputs.summary import interval, num

    def rel(target: str | None) -> str | None:
        return None if not target else os.path.relpath(target, out)

    videos = [_video(out, row, rel) for row in recorded]
    series = []
    marked = [(k, r) for k, r in enumerate(recorded) if r.get("monitor_return") is not None]
    if marked:
        series.append(plots.Series(
            "recorded episode (click: watch it)", [r["step"] for _, r in marked],
            [r["monitor_return"] for _, r in marked], plots.PALETTE[1], line=False,
            tips=[f"step {r['step']}: return {num(r['monitor_return'])} (recorded: click to "
                  "watch)" for _, r in marked],
            links=[f"#video-{k}" for k, _ in marked], key="recorded"))
    points = [e for e in evaluations if e.get("mean_reward") is not None]
    if points:
        band = ([(e.get("ci") or [e["mean_reward"]] * 2)[0] for e in points],
                [(e.get("ci") or [e["mean_reward"]] * 2)[1] for e in points])
        series.append(plots.Series(
            "evaluation mean return (95% CI)", [e["step"] for e in points],
            [e["mean_reward"] for e in points], plots.PALETTE[0], band=band,
            tips=[f"evaluation at step {e['step']}: mean {num(e['mean_reward'])} "
                  f"{interval(e.get('ci'))}" for e in points], key="evaluations"))
    if episodes:
        series.append(plots.Series(
            "training episode (Monitor)", [s for s, _, _ in episodes],
            [r for _, r, _ in episodes], plots.MUTED, line=False,
            tips=[f"episode ending at step {s}: return {num(r)} in {n} steps"
                  for s, r, n in episodes], key="episodes"))
    svg = plots.line_chart(series, title=f"{title}: returns during training",
                           desc="Return of every training episode, evaluation means with "
                                "their 95% intervals, and the recorded episodes, against "
                                "training steps.", xlabel="training steps",
                           ylabel="episode return", integer_x=True, uid="training",
                           height=360)
    rows = [_evaluation(out, e) for e in evaluations]
    best = max(points, key=lambda e: e["mean_reward"]) if points else None
    context = {
        "title": title, "steps": f"{steps:,}", "n_episodes": f"{len(episodes):,}",
        "svg": svg, "picture": picture, "videos": videos, "evaluations": rows,
        "verified": sum(1 for v in videos if v["status"] == "ok"),
        "diverged": sum(1 for v in videos if v["status"] == "bad"),
        "last_eval": _evaluation(out, points[-1]) if points else None,
        "best_eval": _evaluation(out, best) if best else None,
        "failures": None,
    }
    return render_page("training.html.j2", **context)


def _evaluation(out: Path, e: dict[str, Any]) -> dict[str, Any]:
    from rolltape.outputs.summary import interval, num

    run = e.get("run")
    results = Path(run) / "results.json" if run else None
    rate = e.get("success_rate")
    return {"step": e["step"], "mean": num(e.get("mean_reward")), "std": num(e.get("std_reward")),
            "ci": interval(e.get("ci")), "length": num(e.get("mean_ep_length"), 0),
            "success": None if rate is None else f"{100 * rate:.0f}%",
            "href": os.path.relpath(results, out) if results and results.is_file() else None,
            "name": f"evals/{Path(run).name}" if run else None}


def _video(out: Path, row: dict[str, Any], rel: Any) -> dict[str, Any]:
    """One recorded episode for the page: its video (when rendered) and whether its replay
    verified, read from the video's sidecar."""
    from rolltape.outputs.summary import num

    video = row.get("video")
    entry = {"step": row["step"], "env": row.get("env"), "ret": num(row.get("monitor_return")),
             "length": row.get("monitor_length"), "tape": rel(row.get("tape")), "src": None,
             "name": None, "frames": None, "status": "info",
             "headline": "not rendered (yet): its tape is kept", "missing": "Not rendered."}
    if not video or not Path(video).is_file():
        return entry
    entry.update(src=rel(video), name=Path(video).name)
    try:
        result = json.loads(Path(f"{video}.metadata.json").read_text())["result"]
    except (OSError, ValueError, KeyError, TypeError):
        entry["headline"] = "its record (the .metadata.json beside it) is missing"
        return entry
    entry["frames"] = result.get("frames")
    if result.get("verified") is True and result.get("checked") == "rewards":
        entry["headline"] = ("rewards match training's; its frames were not compared (the "
                             "tape holds no observation digests)")
    elif result.get("verified") is True:
        entry.update(status="ok", headline="verified: the replay earned exactly what "
                                           "training earned")
    elif result.get("verified") is False:
        entry.update(status="bad", headline="diverged from training at "
                     f"{result.get('divergence_text') or 'an unknown step'}; drawn from the "
                     "recorded states where the env allows it")
    else:
        entry["headline"] = "drawn from the recorded states (not re-simulated)"
    return entry
