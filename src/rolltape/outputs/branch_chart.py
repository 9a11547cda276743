"""The picture of a branch run: P(success | state at t) (or the expected return from t)
along one episode, with its band, the threshold, and the point of no return or of safety.

Drawn with matplotlib's Agg backend (a file, no display, no GL).

May import: matplotlib, the standard library. Never: the work, policies, GL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rolltape.files import atomic_file


def draw_branch_chart(record: dict[str, Any], path: str | Path) -> Path:
    """Draw ``record`` (a ``branch.json``) as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    points = [p for p in record["points"] if p.get("p") is not None]
    ts = [p["t"] for p in points]
    fig = Figure(figsize=(7.5, 3.2), dpi=110)
    ax = fig.add_subplot()
    success = record.get("success_rule") is not None
    ax.fill_between(ts, [p["lo"] for p in points], [p["hi"] for p in points], color="#9ecae1",
                    alpha=0.6, linewidth=0, label=record["band"])
    ax.plot(ts, [p["p"] for p in points], "-o", color="#08519c", markersize=3,
            label="estimate")
    if success:
        ax.set_ylim(-0.03, 1.03)
        ax.axhline(record["threshold"], color="grey", linestyle=":", linewidth=1)
        for name, colour in (("point_of_no_return", "#cb181d"), ("point_of_safety", "#238b45")):
            t = record.get(name)
            if t is not None:
                ax.axvline(t, color=colour, linewidth=1.5,
                           label=f"{name.replace('_', ' ')}: step {t}")
    else:
        recorded = [p.get("recorded") for p in points]
        ax.plot(ts, recorded, "--", color="#636363", linewidth=1, label="recorded episode")
    ep = record["episode"]
    outcome = ("succeeded" if ep["success"] else "failed") if success else \
        f"return {ep['return']:.4g}" if ep["return"] is not None else "return n/a"
    ax.set_title(f"{ep['tape']} (seed {ep['seed']}, {outcome}): {record['estimate']}, "
                 f"{record['branches']} branches a step", fontsize=8)
    ax.set_xlabel("step t")
    ax.set_xlim(0, max(ep["length"], 1))
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    with atomic_file(path) as f:
        fig.savefig(f, format="png")
    return path
