"""``report.ipynb``: a Jupyter notebook that explores one run, written into the run folder.

The notebook reads ``results.json``, ``metadata.json``, the tapes and the videos by paths
relative to itself, so the run folder can be moved or copied whole. It needs only what
rolltape needs: the summary's cells come from :mod:`rolltape.outputs.summary` (as the CLI's
and the report's do), tables are HTML built here (pandas is used when importable) and charts
are drawn with matplotlib. Provenance (command, versions, checkpoint sha256) is written into
a markdown cell when the notebook is generated, so it reads the same without running
anything.

May import: tape, envs, stats, files, errors, outputs. Never: policies, pass 1, executors.

Example (not run: it needs a finished run):
    >>> path = write_notebook("runs/cheetah")   # runs/cheetah/report.ipynb
    >>> # jupyter lab runs/cheetah/report.ipynb
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rolltape.errors import UsageError
from rolltape.files import write_text

NOTEBOOK_NAME = "report.ipynb"

__all__ = ["NOTEBOOK_NAME", "Table", "build_notebook", "write_notebook"]


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
        "rolltape; they use pandas when it is installed.",
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
from IPython.display import Image, Video, display
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rolltape import Tape
from rolltape.outputs.notebook import Table
from rolltape.outputs.summary import improvement_line, num, summary_rows, summary_title

# Paths are relative to this notebook, so the run folder can be moved or copied.
RUN = Path(".")
if not (RUN / "results.json").is_file():
    RUN = Path(__FALLBACK__)  # where the run was when this notebook was written
results = json.loads((RUN / "results.json").read_text())
metadata = json.loads((RUN / "metadata.json").read_text())

try:  # optional: a nicer table of the episodes when installed
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


print(f"{results['env_id']}: {results['episodes']} episodes, run folder {RUN.resolve()}")
'''

_SUMMARY = '''\
header, rows = summary_rows(results)
display(Table(header, rows, title=summary_title(results)))
line = improvement_line(results)
if line:
    print(line)
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
    display(Table(columns, [[num(e[c]) if isinstance(e[c], float) else e[c] for c in columns]
                            for e in episodes], title="Every episode of the policy"))
'''

_RETURNS = '''\
# An episode whose return is not a finite number (null in results.json) is not plotted.
series = {role: ([r["index"] for r in ROWS[role] if r["return"] is not None],
                 [r["return"] for r in ROWS[role] if r["return"] is not None]) for role in ROLES}
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
'''

_DISTRIBUTION = '''\
samples = {role: [r["return"] for r in ROWS[role] if r["return"] is not None] for role in ROLES}
everything = np.concatenate([np.asarray(v, dtype=float) for v in samples.values()])
edges = np.histogram_bin_edges(everything, bins=int(min(30, max(5, len(everything) // 2))))
fig = Figure(figsize=(7.5, 3.2))
ax = fig.subplots()
for k, (role, values) in enumerate(samples.items()):
    ax.hist(values, bins=edges, alpha=0.55, color=f"C{k}", label=role)
    if values:  # a role whose every return was NaN has no mean
        ax.axvline(np.mean(values), color=f"C{k}", linestyle="--", linewidth=1)
ax.set(xlabel="return", ylabel="episodes", title="Distribution of returns (dashed: mean)")
ax.yaxis.set_major_locator(MaxNLocator(integer=True))
ax.legend()
show(fig)
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
else:
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
