"""``report.ipynb``: a Jupyter notebook that explores one run, written into the run folder.

The notebook reads ``results.json``, ``metadata.json``, the tapes and the videos by paths
relative to itself, so the run folder can be moved or copied whole. It needs only what
rolltape needs: tables are HTML built here (pandas is used when importable) and charts are
drawn with matplotlib when importable, else as inline SVG built by the helpers below.
Provenance (command, versions, checkpoint sha256) is written into a markdown cell when the
notebook is generated, so it reads the same without running anything.

Example:
    >>> path = write_notebook("runs/cheetah")   # runs/cheetah/report.ipynb
    >>> # jupyter lab runs/cheetah/report.ipynb
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shlex
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rolltape.outputs.artifacts import write_text
from rolltape.errors import UsageError

NOTEBOOK_NAME = "report.ipynb"

__all__ = ["NOTEBOOK_NAME", "Table", "build_notebook", "svg_histogram", "svg_lines",
           "write_notebook"]


# -- writing the notebook ------------------------------------------------------------------
def write_notebook(run_dir: str | os.PathLike[str], *, overwrite: bool = True) -> Path:
    """Write ``RUN/report.ipynb`` (atomically) and return its path.

    ``run_dir`` is a finished run folder (``results.json`` and ``metadata.json``), or its
    staging folder ``.NAME.partial``. Anything else is a :class:`UsageError`, as is an
    existing notebook when ``overwrite`` is false.
    """
    import nbformat

    from rolltape.outputs.report import load_run

    run, results, metadata = load_run(run_dir)
    if metadata is None:
        raise UsageError(f"'{run}' is not a finished rolltape run (it has no readable "
                         "metadata.json); give the folder that `rolltape eval --out` wrote.")
    target = run / NOTEBOOK_NAME
    if target.exists() and not overwrite:
        raise UsageError(f"'{target}' already exists; pass overwrite=True to replace it.")
    nb = build_notebook(results, metadata, run)
    nbformat.validate(nb)
    text = nbformat.writes(nb, version=4)
    return write_text(target, text if text.endswith("\n") else text + "\n")


def build_notebook(results: Mapping[str, Any], metadata: Mapping[str, Any],
                   run_dir: str | os.PathLike[str]) -> Any:
    """The notebook (an ``nbformat`` v4 node, not executed) for one run's files."""
    from nbformat import v4

    cells = [
        v4.new_markdown_cell(_title_markdown(results, metadata), id="title"),
        v4.new_code_cell(_SETUP.replace("__FALLBACK__", repr(str(_final_path(run_dir)))),
                         id="setup"),
        v4.new_markdown_cell("## Summary\n\nEvery number comes from pass 1 (rendering off). "
                             "IQM is the interquartile mean; intervals are 95%.", id="summary-md"),
        v4.new_code_cell(_SUMMARY, id="summary"),
        v4.new_code_cell(_EPISODES, id="episodes"),
        v4.new_markdown_cell("## Returns\n\nThe return of each episode, policy and baseline "
                             "on the same seeds, and how the returns are spread.",
                             id="returns-md"),
        v4.new_code_cell(_RETURNS, id="returns"),
        v4.new_code_cell(_DISTRIBUTION, id="distribution"),
        v4.new_markdown_cell("## Rendered episodes\n\nCumulative reward of each rendered "
                             "episode, read from its tape (dashed: the baseline on the same "
                             "seed), then the videos. Each video was replayed from its tape "
                             "and checked step by step against pass 1.", id="rendered-md"),
        v4.new_code_cell(_CUMULATIVE, id="cumulative"),
        v4.new_code_cell(_VIDEOS, id="videos"),
        v4.new_markdown_cell(_provenance_markdown(results, metadata), id="provenance"),
    ]
    nb = v4.new_notebook(cells=cells)
    nb.metadata.update({
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "rolltape": {"schema_version": results.get("schema_version"),
                     "env_id": results.get("env_id")},
    })
    return nb


def _final_path(run_dir: str | os.PathLike[str]) -> Path:
    """Where the run will live: a staging folder ``.NAME.partial`` is moved to ``NAME``."""
    path = Path(run_dir).resolve()
    match = re.fullmatch(r"\.(.+)\.partial", path.name)
    return path.with_name(match.group(1)) if match else path


# -- markdown filled at generation time ----------------------------------------------------
def _code(text: Any) -> str:
    """An inline code span that survives backticks in the text."""
    text = str(text).replace("\n", " ")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: Any) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _seeds_text(seeds: Sequence[int]) -> str:
    if not seeds:
        return "none"
    if len(seeds) == 1:
        return str(seeds[0])
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}..{seeds[-1]}"
    shown = ", ".join(str(s) for s in seeds[:10])
    return shown + (f", ... ({len(seeds)} in all)" if len(seeds) > 10 else "")


def _policy_text(policy: Mapping[str, Any] | None) -> str:
    if not policy:
        return "unknown policy"
    kind = policy.get("kind", "?")
    if kind == "random":
        return "random policy"
    words = [str(kind)] + ([str(policy["algo"])] if policy.get("algo") else [])
    mode = "deterministic" if policy.get("deterministic") else "stochastic"
    return f"{' '.join(words)} policy {_code(policy.get('source', '?'))} ({mode})"


def _title_markdown(results: Mapping[str, Any], metadata: Mapping[str, Any]) -> str:
    env = results.get("env") or {}
    env_id = results.get("env_id") or env.get("id", "?")
    seeds = (metadata.get("seeds") or {}).get("episodes") or [
        r.get("seed") for r in results.get("episodes_rows", [])]
    episodes = results.get("episodes", len(results.get("episodes_rows", [])))
    baseline = "a random baseline on the same seeds" if results.get("baseline_rows") else "none"
    lines = [
        f"# {_cell(env_id)}: {_policy_text(results.get('policy'))}",
        "",
        f"- **Environment:** {_code(env_id)}"
        + (f", kwargs {_code(json.dumps(env.get('kwargs')))}" if env.get("kwargs") else "")
        + (f", at most {env['max_episode_steps']} steps per episode"
           if env.get("max_episode_steps") else ""),
        f"- **Policy:** {_policy_text(results.get('policy'))}",
        f"- **Episodes:** {episodes}, reset with seeds {_seeds_text(seeds)}",
        f"- **Baseline:** {baseline}",
        f"- **Videos:** {len(results.get('videos') or [])}",
        "",
        "Run the cells from this folder (Jupyter does): every path is relative to this "
        "notebook, so the run folder can be moved or copied whole. The cells need only "
        "rolltape; they use matplotlib and pandas when those are installed.",
    ]
    return "\n".join(lines)


def _provenance_markdown(results: Mapping[str, Any], metadata: Mapping[str, Any]) -> str:
    command = metadata.get("command")
    command_text = shlex.join(str(c) for c in command) if isinstance(command, list) else command
    policy = metadata.get("policy") or results.get("policy") or {}
    lines = ["## Provenance", "", "Written from `metadata.json` when this notebook was made.", ""]
    if command_text:
        fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", command_text)),
                                     default=0))
        lines += ["Command:", "", f"{fence}sh", command_text, fence, ""]
    facts = [
        ("working folder", metadata.get("cwd")),
        ("policy source", policy.get("source")),
        ("checkpoint sha256", metadata.get("checkpoint_sha256") or policy.get("sha256")),
        ("VecNormalize statistics", policy.get("vecnormalize")),
        ("VecNormalize sha256", metadata.get("vecnormalize_sha256")),
        ("GL backend used", ", ".join(((metadata.get("render") or {}).get("backend_used"))
                                      or []) or None),
        ("resumed", metadata.get("resumed")),
    ]
    platform = metadata.get("platform") or {}
    if platform:
        facts.append(("platform", " ".join(str(platform[k]) for k in
                                           ("system", "release", "machine") if platform.get(k))
                      + (f", {platform['cpu_count']} CPUs" if platform.get("cpu_count") else "")))
    for key, value in (metadata.get("timings") or {}).items():
        facts.append((key.replace("_s", "").replace("pass", "pass ") + " (s)",
                      f"{value:.2f}" if isinstance(value, (int, float)) else value))
    lines += ["| | |", "|---|---|"]
    lines += [f"| {name} | {_cell(_code(value)) if value is not None else 'n/a'} |"
              for name, value in facts]
    versions = metadata.get("versions") or {}
    if versions:
        lines += ["", "Versions:", "", "| package | version |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_cell(v) if v else 'not installed'} |"
                  for k, v in versions.items()]
    warnings = metadata.get("warnings") or results.get("warnings") or []
    if warnings:
        lines += ["", "Warnings:", ""] + [f"- {_cell(w)}" for w in warnings]
    return "\n".join(lines)


# -- the code cells (run in the notebook, from the run folder) -----------------------------
_SETUP = '''\
import json
from io import BytesIO
from pathlib import Path

import numpy as np
from IPython.display import SVG, Image, Video, display

from rolltape import Tape
from rolltape.outputs.notebook import Table, svg_histogram, svg_lines

# Paths are relative to this notebook, so the run folder can be moved or copied.
RUN = Path(".")
if not (RUN / "results.json").is_file():
    RUN = Path(__FALLBACK__)  # where the run was when this notebook was written
results = json.loads((RUN / "results.json").read_text())
metadata = json.loads((RUN / "metadata.json").read_text())

try:  # optional: nicer charts and tables when installed
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
except ImportError:
    Figure = None
try:
    import pandas as pd
except ImportError:
    pd = None

ROLES = [role for role in ("policy", "baseline") if role in results["summary"]]
ROWS = {"policy": results["episodes_rows"], "baseline": results.get("baseline_rows") or []}


def show(fig):
    """Display a matplotlib figure as a PNG (no pyplot, no backend state)."""
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    display(Image(data=buf.getvalue(), format="png"))


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


print(f"{results['env_id']}: {results['episodes']} episodes, run folder {RUN.resolve()}")
'''

_SUMMARY = '''\
rows = []
for role in ROLES:
    s = results["summary"][role]
    success = "n/a" if s.get("success_rate") is None else (
        f"{s['success_count']}/{s['n']} [{fmt(s['success_ci'][0])}, {fmt(s['success_ci'][1])}]")
    rows.append([role, f"{fmt(s['mean'])} ± {fmt(s['std'])}",
                 f"{fmt(s['iqm'])} [{fmt(s['iqm_ci'][0])}, {fmt(s['iqm_ci'][1])}]",
                 f"{fmt(s['min'])} / {fmt(s['max'])}", success, fmt(s.get("mean_length"), ".0f")])
display(Table(["", "mean ± std", "IQM [95% CI]", "min / max", "success [95% CI]", "length"],
              rows, title=f"{results['env_id']}: {results['episodes']} episodes"))
imp = results.get("improvement_over_baseline")
if imp:
    print(f"improvement over random on the same seeds: {imp['mean_diff']:+.2f} "
          f"(95% CI {imp['diff_ci'][0]:+.2f} .. {imp['diff_ci'][1]:+.2f}, "
          f"{imp['n_pairs']} pairs)")
'''

_EPISODES = '''\
baseline_by_seed = {r["seed"]: r["return"] for r in ROWS["baseline"]}
episodes = [{"episode": r["index"], "seed": r["seed"], "return": r["return"],
             **({"baseline return": baseline_by_seed.get(r["seed"])} if ROWS["baseline"] else {}),
             "length": r["length"], "success": r.get("success"),
             "terminated": r.get("terminated"), "truncated": r.get("truncated"),
             "tape": r["tape"]} for r in ROWS["policy"]]
if pd is not None:
    episodes_df = pd.DataFrame(episodes).set_index("episode")
    display(episodes_df)
else:
    columns = list(episodes[0])
    display(Table(columns, [[fmt(e[c]) if isinstance(e[c], float) else e[c] for c in columns]
                            for e in episodes], title="Every episode of the policy"))
'''

_RETURNS = '''\
# An episode whose return is not a finite number (null in results.json) is not plotted.
series = {role: ([r["index"] for r in ROWS[role] if r["return"] is not None],
                 [r["return"] for r in ROWS[role] if r["return"] is not None]) for role in ROLES}
if Figure is not None:
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.subplots()
    for role, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", linestyle="-" if role == "policy" else "--", label=role)
    ax.set(xlabel="episode (seed = base seed + episode)", ylabel="return",
           title="Return per episode")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    show(fig)
else:
    display(SVG(svg_lines([(role, xs, ys, role != "policy") for role, (xs, ys) in series.items()],
                          title="Return per episode", markers=True, integer_x=True,
                          xlabel="episode (seed = base seed + episode)", ylabel="return")))
'''

_DISTRIBUTION = '''\
samples = {role: [r["return"] for r in ROWS[role] if r["return"] is not None] for role in ROLES}
everything = np.concatenate([np.asarray(v, dtype=float) for v in samples.values()])
edges = np.histogram_bin_edges(everything, bins=int(min(30, max(5, len(everything) // 2))))
if Figure is not None:
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.subplots()
    for k, (role, values) in enumerate(samples.items()):
        ax.hist(values, bins=edges, alpha=0.55, color=f"C{k}", label=role)
        ax.axvline(np.mean(values), color=f"C{k}", linestyle="--", linewidth=1)
    ax.set(xlabel="return", ylabel="episodes", title="Distribution of returns (dashed: mean)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    show(fig)
else:
    display(SVG(svg_histogram(samples, edges.tolist(), xlabel="return", ylabel="episodes",
                              title="Distribution of returns (dashed: mean)")))
'''

_CUMULATIVE = '''\
videos = results.get("videos") or []
baseline_tapes = {r["seed"]: r["tape"] for r in ROWS["baseline"]}
curves = []
for v in videos:
    tape = Tape.load(RUN / v["tape"])
    curves.append((f"episode {v['index']} (seed {v['seed']})", np.cumsum(tape.rewards), False))
    other = baseline_tapes.get(v["seed"])
    if other and (RUN / other).is_file():
        curves.append((f"baseline, seed {v['seed']}",
                       np.cumsum(Tape.load(RUN / other).rewards), True))
if not curves:
    print("No episode was rendered (eval --video 0).")
elif Figure is not None:
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.subplots()
    for k, (label, ys, dashed) in enumerate(curves):
        color = f"C{(k - 1 if dashed else k) % 10}"
        ax.plot(np.arange(1, len(ys) + 1), ys, color=color, label=label,
                linestyle="--" if dashed else "-", alpha=0.6 if dashed else 1.0)
    ax.set(xlabel="step", ylabel="cumulative reward",
           title="Cumulative reward of rendered episodes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    show(fig)
else:
    display(SVG(svg_lines([(label, list(range(1, len(ys) + 1)), ys.tolist(), dashed)
                           for label, ys, dashed in curves],
                          title="Cumulative reward of rendered episodes", pair_dashed=True,
                          xlabel="step", ylabel="cumulative reward")))
'''

_VIDEOS = '''\
for v in videos:
    if v.get("verified") is True:
        check = "verified: the replay earned exactly what pass 1 earned"
    elif v.get("verified") is False:
        check = "DIVERGED from pass 1: " + (v.get("divergence_text") or "see results.json")
    else:
        check = "not verified"
    print(f"episode {v['index']} (seed {v['seed']}), {v.get('frames', '?')} frames, {check}")
    path = RUN / v["path"] if v.get("path") else None
    if path is None or not path.exists():
        print(f"  no video: {v.get('error') or 'the file is missing'}")
    elif path.suffix.lower() == ".gif":
        display(Image(url=str(path)))
    elif path.is_dir():  # a folder of PNG frames: show the first
        frames = sorted(path.glob("frame_*.png"))
        if frames:
            display(Image(filename=str(frames[0])))
    else:
        display(Video(str(path), embed=False))
'''


# -- helpers the notebook imports ----------------------------------------------------------
class Table:
    """A small table that displays as HTML in Jupyter and as aligned text elsewhere."""

    def __init__(self, header: Sequence[Any], rows: Iterable[Sequence[Any]],
                 title: str | None = None) -> None:
        self.header = [_text(h) for h in header]
        self.rows = [[_text(c) for c in row] for row in rows]
        self.title = title

    def _repr_html_(self) -> str:
        caption = (f"<caption style='text-align:left'><b>{html.escape(self.title)}</b>"
                   "</caption>") if self.title else ""
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(
            f"<td style='text-align:{'left' if k == 0 else 'right'}'>{html.escape(c)}</td>"
            for k, c in enumerate(row)) + "</tr>" for row in self.rows)
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __str__(self) -> str:
        widths = [max(len(r[k]) for r in [self.header, *self.rows] if k < len(r))
                  for k in range(len(self.header))]
        lines = [self.title] if self.title else []
        for n, row in enumerate([self.header, *self.rows]):
            lines.append("  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                                   for k, (c, w) in enumerate(zip(row, widths))).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    __repr__ = __str__


def _text(value: Any) -> str:
    return "n/a" if value is None else str(value)


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
_W, _H = 720, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 190, 34, 46


def _ticks(lo: float, hi: float, count: int = 6, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] (whole numbers only when ``integer``)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1, math.ceil(step))
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + k * step, 12) for k in range(int((hi - first) / step + 1e-9) + 1)]


def _span(values: Iterable[float]) -> tuple[float, float]:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if hi == lo:
        pad = abs(lo) * 0.05 or 0.5
        return lo - pad, hi + pad
    return lo, hi


def _num(value: float) -> str:
    return f"{value:.6g}"


class _Canvas:
    """Axes, ticks, labels and a legend in SVG; plotting maps data to pixels."""

    def __init__(self, xspan: tuple[float, float], yspan: tuple[float, float], title: str,
                 xlabel: str, ylabel: str, integer_x: bool = False,
                 integer_y: bool = False) -> None:
        pad = (yspan[1] - yspan[0]) * 0.05
        self.integer_x, self.integer_y = integer_x, integer_y
        self.x0, self.x1 = xspan
        self.y0, self.y1 = yspan[0] - pad, yspan[1] + pad
        self.parts: list[str] = []
        self.legend: list[tuple[str, str, bool, str]] = []
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel

    def px(self, x: float) -> float:
        width = _W - _LEFT - _RIGHT
        return _LEFT + (x - self.x0) / ((self.x1 - self.x0) or 1.0) * width

    def py(self, y: float) -> float:
        height = _H - _TOP - _BOTTOM
        return _TOP + (1 - (y - self.y0) / ((self.y1 - self.y0) or 1.0)) * height

    def render(self) -> str:
        esc = html.escape
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
               f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11">',
               f'<rect width="{_W}" height="{_H}" fill="white"/>']
        for y in _ticks(self.y0, self.y1, integer=self.integer_y):
            if self.y0 <= y <= self.y1:
                py = self.py(y)
                out.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{py:.1f}" y2="{py:.1f}" '
                           'stroke="#e5e5e5"/>')
                out.append(f'<text x="{_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">'
                           f'{esc(_num(y))}</text>')
        for x in _ticks(self.x0, self.x1, integer=self.integer_x):
            if self.x0 <= x <= self.x1:
                px = self.px(x)
                out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{_H - _BOTTOM}" '
                           f'y2="{_H - _BOTTOM + 4}" stroke="#333"/>')
                out.append(f'<text x="{px:.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle">'
                           f'{esc(_num(x))}</text>')
        out.extend(self.parts)
        out.append(f'<rect x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
                   f'height="{_H - _TOP - _BOTTOM}" fill="none" stroke="#333"/>')
        out.append(f'<text x="{_LEFT}" y="{_TOP - 12}" font-size="13" font-weight="bold">'
                   f'{esc(self.title)}</text>')
        out.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2:.1f}" y="{_H - 10}" '
                   f'text-anchor="middle">{esc(self.xlabel)}</text>')
        out.append(f'<text transform="translate(16,{(_TOP + _H - _BOTTOM) / 2:.1f}) rotate(-90)" '
                   f'text-anchor="middle">{esc(self.ylabel)}</text>')
        for k, (label, color, dashed, kind) in enumerate(self.legend):
            y = _TOP + 10 + 16 * k
            x = _W - _RIGHT + 12
            if kind == "box":
                out.append(f'<rect x="{x}" y="{y - 6}" width="18" height="10" fill="{color}" '
                           'fill-opacity="0.55"/>')
            else:
                dash = ' stroke-dasharray="5,3"' if dashed else ""
                out.append(f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{color}" '
                           f'stroke-width="2"{dash}/>')
            label = label if len(label) <= 28 else label[:27] + "…"
            out.append(f'<text x="{x + 24}" y="{y + 4}">{esc(label)}</text>')
        out.append("</svg>")
        return "\n".join(out)


def svg_lines(series: Sequence[tuple[str, Sequence[float], Sequence[float], bool]], *,
              title: str = "", xlabel: str = "", ylabel: str = "", markers: bool = False,
              integer_x: bool = False, pair_dashed: bool = False,
              max_points: int = 600) -> str:
    """An SVG line chart of ``(label, xs, ys, dashed)`` series, in plain Python.

    With ``pair_dashed`` a dashed series takes the colour of the solid one before it (a
    baseline beside its policy episode). Long series are thinned to ``max_points`` points.
    """
    xs_all = [x for _, xs, _, _ in series for x in xs]
    ys_all = [y for _, _, ys, _ in series for y in ys]
    xspan = _span(xs_all)
    if integer_x and xspan[1] - xspan[0] < 2:  # one or two episodes: room around them
        xspan = (xspan[0] - 0.5, xspan[1] + 0.5)
    elif markers:  # keep the end markers inside the frame
        pad = (xspan[1] - xspan[0]) * 0.03
        xspan = (xspan[0] - pad, xspan[1] + pad)
    canvas = _Canvas(xspan, _span(ys_all), title, xlabel, ylabel, integer_x=integer_x)
    color_index = -1
    for label, xs, ys, dashed in series:
        if not (pair_dashed and dashed) or color_index < 0:
            color_index += 1
        color = _COLORS[color_index % len(_COLORS)]
        points = [(float(x), float(y)) for x, y in zip(xs, ys)
                  if y is not None and math.isfinite(float(y))]
        if len(points) > max_points:
            stride = math.ceil(len(points) / max_points)
            points = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
        path = " ".join(f"{canvas.px(x):.1f},{canvas.py(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        canvas.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                            f'stroke-width="1.8"{dash}/>')
        if markers:
            canvas.parts.extend(f'<circle cx="{canvas.px(x):.1f}" cy="{canvas.py(y):.1f}" r="3" '
                                f'fill="{color}"/>' for x, y in points)
        canvas.legend.append((label, color, dashed, "line"))
    return canvas.render()


def svg_histogram(samples: Mapping[str, Sequence[float]], edges: Sequence[float], *,
                  title: str = "", xlabel: str = "", ylabel: str = "") -> str:
    """An SVG histogram of each named sample over shared bin ``edges`` (overlaid, with a
    dashed line at each mean), in plain Python."""
    edges = [float(e) for e in edges]
    if len(edges) < 2:
        raise ValueError("a histogram needs at least two bin edges")
    counts = {}
    for name, values in samples.items():
        bins = [0] * (len(edges) - 1)
        for v in values:
            if v is None or not edges[0] <= v <= edges[-1]:
                continue
            k = next((i for i in range(len(bins)) if v < edges[i + 1]), len(bins) - 1)
            bins[k] += 1
        counts[name] = bins
    top = max((c for bins in counts.values() for c in bins), default=1) or 1
    canvas = _Canvas((edges[0], edges[-1]), (0.0, float(top)), title, xlabel, ylabel,
                     integer_y=True)
    canvas.y0 = 0.0
    for n, (name, bins) in enumerate(counts.items()):
        color = _COLORS[n % len(_COLORS)]
        for k, c in enumerate(bins):
            if c:
                x, x2, y = canvas.px(edges[k]), canvas.px(edges[k + 1]), canvas.py(c)
                canvas.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{x2 - x:.1f}" '
                                    f'height="{canvas.py(0) - y:.1f}" fill="{color}" '
                                    'fill-opacity="0.55" stroke="white"/>')
        values = [float(v) for v in samples[name] if v is not None]
        if values:
            mx = canvas.px(math.fsum(values) / len(values))
            canvas.parts.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{_TOP}" '
                                f'y2="{_H - _BOTTOM}" stroke="{color}" stroke-dasharray="4,3"/>')
        canvas.legend.append((name, color, False, "box"))
    return canvas.render()
