"""The timeline of a training run: evaluation returns (mean with its 95% bootstrap interval)
against training steps, with the recorded training videos placed where they were taken;
and the small ``report.html`` that shows it with links to every video and evaluation.

May import: files, matplotlib (inside functions). Never: SB3, torch, pass 1, pass 2.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any, Sequence


def draw_timeline(evaluations: Sequence[dict[str, Any]], recorded: Sequence[dict[str, Any]],
                  path: Path) -> str | None:
    """Draw ``path`` (a PNG); returns its file name, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
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
                    recorded: Sequence[dict[str, Any]]) -> str:
    """A self-contained page: the timeline, then tables of evaluations and recordings."""
    def link(target: str | None) -> str:
        if not target:
            return "-"
        rel = os.path.relpath(target, out)
        return f'<a href="{html.escape(rel)}">{html.escape(Path(target).name)}</a>'

    def num(x: Any) -> str:
        return "-" if x is None else f"{x:.4g}"

    rows_eval = "".join(
        f"<tr><td>{e['step']}</td><td>{num(e.get('mean_reward'))}</td>"
        f"<td>{num((e.get('ci') or [None])[0])} .. {num((e.get('ci') or [None, None])[1])}</td>"
        f"<td>{num(e.get('mean_ep_length'))}</td><td>{num(e.get('success_rate'))}</td>"
        f"<td>{link(e.get('run'))}</td></tr>" for e in evaluations)
    rows_rec = "".join(
        f"<tr><td>{r['step']}</td><td>{r['env']}</td><td>{num(r.get('monitor_return'))}</td>"
        f"<td>{link(r.get('tape'))}</td><td>{link(r.get('video'))}</td></tr>" for r in recorded)
    image = (f'<img src="{html.escape(picture)}" alt="training timeline">' if picture
             else "<p>(no picture: matplotlib is not installed)</p>")
    return f"""<!doctype html><meta charset="utf-8"><title>rolltape training run</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:right}}</style>
<h1>Training run</h1>{image}
<h2>Evaluations</h2><table><tr><th>step</th><th>mean return</th><th>95% CI</th>
<th>mean length</th><th>success rate</th><th>run</th></tr>{rows_eval}</table>
<h2>Recorded training episodes</h2><table><tr><th>step</th><th>sub-env</th>
<th>return (Monitor)</th><th>tape</th><th>video</th></tr>{rows_rec}</table>
"""
