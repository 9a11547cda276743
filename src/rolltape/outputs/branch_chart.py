"""The picture of a branch run: P(success | state at t) (or the expected return from t)
along one episode, with its band, the threshold, and the point of no return or of safety;
its line of text; and where an episode's branch results live in a run (``branch_label``),
which ``rolltape branch`` writes and the report reads.

Drawn with matplotlib's Agg backend (a file, no display, no GL).

May import: matplotlib, the standard library. Never: the work, policies, GL.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from rolltape.files import atomic_file

#: Where the plot's axes lie in the picture, as fractions of its width and height (left,
#: right, bottom, top; from the bottom, as matplotlib counts): fixed rather than fitted, so
#: that the report can place its marker of the video's current step over the PNG.
AXES = (0.1, 0.98, 0.14, 0.9)


def draw_branch_chart(record: dict[str, Any], path: str | Path) -> Path:
    """Draw ``record`` (a ``branch.json``) as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    fig = branch_figure(record)
    path = Path(path)
    with atomic_file(path) as f:
        fig.savefig(f, format="png")
    return path


def branch_figure(record: dict[str, Any]) -> Any:
    """The chart of ``record`` (a ``branch.json``) as a matplotlib ``Figure`` (no pyplot, no
    backend state: the notebook displays it, :func:`draw_branch_chart` saves it)."""
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
    left, right, bottom, top = AXES
    fig.subplots_adjust(left=left, right=right, bottom=bottom, top=top)
    return fig


def branch_label(tape: str) -> str:
    """The folder, under a run's ``branch/``, of the episode whose tape is ``tape`` (relative
    to the run): its path under ``tapes/`` without the suffix, a suite's folders joined by -.

    >>> branch_label("tapes/policy-0003.npz"), branch_label("tapes/mazes/umaze/policy-0001.npz")
    ('policy-0003', 'mazes-umaze-policy-0001')
    """
    parts = PurePosixPath(tape).with_suffix("").parts
    return "-".join(parts[1:] if parts[:1] == ("tapes",) else parts)


def summary_line(record: dict[str, Any]) -> str:
    """One episode's result in a line.

    >>> summary_line({"episode": {"tape": "tapes/policy-0003.npz", "success": False},
    ...               "success_rule": "at_end", "point_of_no_return": 40, "crossing": 41,
    ...               "grid": [0, 5], "branches": 8})
    'tapes/policy-0003.npz (failed): point of no return at step 40 (estimate below the threshold from step 41); 2 grid steps x 8 branches'
    """
    ep = record["episode"]
    size = f"{len(record['grid'])} grid steps x {record['branches']} branches"
    if record.get("success_rule") is None:
        return f"{ep['tape']}: expected return from each grid step; {size}"
    failed = ep["success"] is False
    name = "point of no return" if failed else "point of safety"
    point = record.get("point_of_no_return" if failed else "point_of_safety")
    where = f"at step {point}" if point is not None else "not reached"
    crossing = record.get("crossing")
    side = "below" if failed else "above"
    cross = (f" (estimate {side} the threshold from step {crossing})"
             if crossing is not None else "")
    extra = "" if "replays_source" not in record else \
        f"; replays the tape bit for bit: {'yes' if record['replays_source'] else 'NO'}"
    return (f"{ep['tape']} ({'failed' if failed else 'succeeded'}): {name} {where}{cross}; "
            f"{size}{extra}")
