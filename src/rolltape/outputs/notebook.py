"""``report.ipynb``: a Jupyter notebook that explores one run, written into the run folder.

The notebook loads the run's record (:meth:`rolltape.record.Run.load`), the tapes and the
videos by paths relative to itself, so the run folder can be moved or copied whole. Episodes
are matched by their full key (a policy episode and its baseline: the same task and seed),
and a suite's tables and charts are per task. It needs only what
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
from rolltape.outputs.summary import success_rule_text
from rolltape.record import SCHEMA_VERSION, Results, Run

NOTEBOOK_NAME = "report.ipynb"

__all__ = ["NOTEBOOK_NAME", "Table", "build_notebook", "write_notebook"]


# -- writing the notebook ------------------------------------------------------------------
def write_notebook(run: Run | str | os.PathLike[str], *, overwrite: bool = True) -> Path:
    """Write ``RUN/report.ipynb`` (atomically) and return its path.

    ``run`` is a :class:`rolltape.record.Run`, or a finished run folder (``results.json``
    and ``metadata.json``) or its staging folder ``.NAME.partial``. Anything else is a
    :class:`UsageError`, as is an existing notebook when ``overwrite`` is false.
    """
    import nbformat

    if not isinstance(run, Run):
        run = Run.load(run)
    if run.metadata is None:
        raise UsageError(f"'{run.path}' is not a finished rolltape run (it has no readable "
                         "metadata.json); give the folder that `rolltape eval --out` wrote.")
    target = run.path / NOTEBOOK_NAME
    if target.exists() and not overwrite:
        raise UsageError(f"'{target}' already exists; pass overwrite=True to replace it.")
    nb = build_notebook(run)
    nbformat.validate(nb)
    text = nbformat.writes(nb, version=4)
    return write_text(target, text if text.endswith("\n") else text + "\n")


def build_notebook(run: Run) -> Any:
    """The notebook (an ``nbformat`` v4 node, not executed) for one run."""
    from nbformat import v4

    results, metadata = run.results, run.metadata.facts if run.metadata else {}
    cells = [
        v4.new_markdown_cell(_title_markdown(results, metadata), id="title"),
        v4.new_code_cell(_SETUP.replace("__FALLBACK__", repr(str(_final_path(run.path)))),
                         id="setup"),
        v4.new_markdown_cell("## Summary\n\nEvery number comes from pass 1 (rendering off). "
                             "IQM is the interquartile mean; intervals are 95%.", id="summary-md"),
        v4.new_code_cell(_SUMMARY, id="summary"),
        v4.new_code_cell(_EPISODES, id="episodes"),
        v4.new_markdown_cell("## Returns\n\nThe return of each episode, policy and baseline "
                             "on the same seeds, and how the returns are spread"
                             + (" (one chart per task: tasks have their own reward scales)."
                                if results.is_suite else "."), id="returns-md"),
        v4.new_code_cell(_RETURNS, id="returns"),
        v4.new_code_cell(_DISTRIBUTION, id="distribution"),
        v4.new_markdown_cell("## Rendered episodes\n\nCumulative reward of each rendered "
                             "episode, read from its tape (dashed: the baseline on the same "
                             "seed), then the videos. Each video was replayed from its tape "
                             "and checked step by step against pass 1.", id="rendered-md"),
        v4.new_code_cell(_CUMULATIVE, id="cumulative"),
        v4.new_code_cell(_VIDEOS, id="videos"),
        v4.new_markdown_cell("## Where was each episode decided?\n\nThe curves of "
                             "`rolltape branch` (read from `branch/*/branch.json` when this "
                             "cell runs, so a branch run made after this notebook shows): "
                             "P(success | state at t), or the expected return from t, with "
                             "its band and the point of no return or of safety.",
                             id="branch-md"),
        v4.new_code_cell(_BRANCH, id="branch"),
        v4.new_markdown_cell(_provenance_markdown(results, metadata), id="provenance"),
    ]
    nb = v4.new_notebook(cells=cells)
    nb.metadata.update({
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "rolltape": {"schema_version": SCHEMA_VERSION, "env_id": results.env_id},
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


def _seeds_line(results: Results, metadata: Mapping[str, Any]) -> str:
    """'reset with seeds 0..9', or per task for a suite."""
    per_task = (metadata.get("seeds") or {}).get("per_task")
    if isinstance(per_task, dict) and per_task:
        return "reset with seeds " + "; ".join(
            f"{_cell(task)} {_seeds_text(list(range(lo, hi + 1)))}"
            for task, (lo, hi) in per_task.items())
    seeds = (metadata.get("seeds") or {}).get("episodes") or [e.key.seed for e in results.episodes]
    return f"reset with seeds {_seeds_text(seeds)}"


def _title_markdown(results: Results, metadata: Mapping[str, Any]) -> str:
    env = results.env or {}
    env_id = results.env_id or env.get("id", "?")
    baseline = "a random baseline on the same seeds" if results.baseline else "none"
    tasks = [f"{s}/{t}" for s, t in results.tasks if s is not None]
    lines = [
        f"# {_cell(env_id)}: {_policy_text(results.policy)}",
        "",
        f"- **Environment:** {_code(env_id)}"
        + (f", kwargs {_code(json.dumps(env.get('kwargs')))}" if env.get("kwargs") else "")
        + (f", at most {env['max_episode_steps']} steps per episode"
           if env.get("max_episode_steps") else ""),
        *([f"- **Tasks:** {', '.join(_cell(t) for t in tasks)}"] if tasks else []),
        f"- **Policy:** {_policy_text(results.policy)}",
        f"- **Episodes:** {results.n_episodes}, {_seeds_line(results, metadata)}",
        f"- **Success:** {success_rule_text(results.success_rule)} (both rules are in the "
        "episode table)",
        f"- **Baseline:** {baseline}",
        f"- **Videos:** {len(results.videos)}",
        "",
        "Run the cells from this folder (Jupyter does): every path is relative to this "
        "notebook, so the run folder can be moved or copied whole. The cells need only "
        "rolltape; they use pandas when it is installed.",
    ]
    return "\n".join(lines)


def _provenance_markdown(results: Results, metadata: Mapping[str, Any]) -> str:
    command = metadata.get("command")
    command_text = shlex.join(str(c) for c in command) if isinstance(command, list) else command
    policy = metadata.get("policy") or results.policy or {}
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
    warnings = metadata.get("warnings") or list(results.warnings)
    if warnings:
        lines += ["", "Warnings:", ""] + [f"- {_cell(w)}" for w in warnings]
    return "\n".join(lines)


# -- the code cells (run in the notebook, from the run folder) -----------------------------
_SETUP = '''\
from io import BytesIO
from pathlib import Path

import numpy as np
from IPython.display import Image, Video, display
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rolltape import Tape
from rolltape.outputs.notebook import Table
from rolltape.outputs.suite_view import headline_text, task_rows
from rolltape.outputs.summary import improvement_line, num, summary_rows, summary_title
from rolltape.pass2.formats import by_suffix
from rolltape.record import Run

# Paths are relative to this notebook, so the run folder can be moved or copied.
RUN = Path(".")
if not (RUN / "results.json").is_file():
    RUN = Path(__FALLBACK__)  # where the run was when this notebook was written
run = Run.load(RUN)
results = run.results
episode_of = results.by_key  # every episode by its key: role, suite, task, index, seed

try:  # optional: a nicer table of the episodes when installed
    import pandas as pd
except ImportError:
    pd = None

ROLES = results.roles
TASKS = results.tasks  # [(None, None)] for one env, (suite, task) per task of a suite


def task_name(task):
    return "/".join(task) if task[0] is not None else results.env_id


def of_task(role, task):
    """The episodes of one role and task whose return is a finite number."""
    return [e for e in results.of_role(role) if e.key.task_key == task and e.ret is not None]


def show(fig):
    """Display a matplotlib figure as a PNG (no pyplot, no backend state)."""
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    display(Image(data=buf.getvalue(), format="png"))


def panels(count, height=3.2):
    """A figure with one row of axes per task (one env: one axes)."""
    fig = Figure(figsize=(7.5, height * count))
    axes = fig.subplots(count, 1, squeeze=False)[:, 0]
    return fig, axes


print(f"{results.env_id}: {results.n_episodes} episodes, run folder {RUN.resolve()}")
'''

_SUMMARY = '''\
if results.suite is not None:  # success per task: returns of different tasks do not pool
    header, rows = task_rows(results.suite)
    display(Table(header, rows, title=f"{results.env_id}: success per task (95% Wilson)"))
    print(headline_text(results.suite))
else:
    header, rows = summary_rows(results.summary)
    display(Table(header, rows, title=summary_title(results)))
    line = improvement_line(results)
    if line:
        print(line)
'''

_EPISODES = '''\
rule = results.success_rule
episodes = []
for e in results.episodes:
    base = episode_of.get(e.key.counterpart("baseline"))  # same task, same seed
    row = {"suite": e.key.suite, "task": e.key.task} if e.key.suite is not None else {}
    row.update({"episode": e.key.index, "seed": e.key.seed, "return": e.ret})
    if results.baseline:
        row["baseline return"] = base.ret if base is not None else None
    row.update({"length": e.length, "success at end": e.success_at_end,
                "success once": e.success_once, "terminated": e.terminated,
                "truncated": e.truncated, "tape": e.tape})
    episodes.append(row)
if pd is not None:
    index = ["suite", "task", "episode"] if results.is_suite else ["episode"]
    episodes_df = pd.DataFrame(episodes).set_index(index)
    display(episodes_df)
else:
    columns = list(episodes[0])
    display(Table(columns, [[num(e[c]) if isinstance(e[c], float) else e[c] for c in columns]
                            for e in episodes], title="Every episode of the policy"))
'''

_RETURNS = '''\
# An episode whose return is not a finite number (null in results.json) is not plotted.
fig, axes = panels(len(TASKS))
for ax, task in zip(axes, TASKS):
    for role in ROLES:
        mine = of_task(role, task)
        ax.plot([e.key.index for e in mine], [e.ret for e in mine], marker="o",
                linestyle="-" if role == "policy" else "--", label=role)
    ax.set(xlabel="episode (seed = base seed + episode)", ylabel="return",
           title=f"{task_name(task)}: return per episode")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
show(fig)
'''

_DISTRIBUTION = '''\
fig, axes = panels(len(TASKS))
for ax, task in zip(axes, TASKS):
    samples = {role: [e.ret for e in of_task(role, task)] for role in ROLES}
    everything = np.concatenate([np.asarray(v, dtype=float) for v in samples.values()])
    if everything.size == 0:
        ax.set_title(f"{task_name(task)}: no finite return")
        continue
    edges = np.histogram_bin_edges(everything, bins=int(min(30, max(5, len(everything) // 2))))
    for k, (role, values) in enumerate(samples.items()):
        ax.hist(values, bins=edges, alpha=0.55, color=f"C{k}", label=role)
        if values:  # a role whose every return was NaN has no mean
            ax.axvline(np.mean(values), color=f"C{k}", linestyle="--", linewidth=1)
    ax.set(xlabel="return", ylabel="episodes",
           title=f"{task_name(task)}: distribution of returns (dashed: mean)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
fig.tight_layout()
show(fig)
'''

_CUMULATIVE = '''\
videos = [v for v in results.videos if v.path]
if not videos:
    print("No episode was rendered (eval --video 0).")
else:
    drawn = [t for t in TASKS if any(v.key.task_key == t for v in videos)]
    fig, axes = panels(len(drawn))
    for ax, task in zip(axes, drawn):
        k = 0
        for v in videos:
            if v.key.task_key != task:
                continue
            ys = np.cumsum(Tape.load(run.tape_path(v)).rewards)
            ax.plot(np.arange(1, len(ys) + 1), ys, color=f"C{k % 10}",
                    label=f"episode {v.key.index} (seed {v.key.seed})")
            base = episode_of.get(v.key.counterpart("baseline"))  # same task, same seed
            if base is not None and run.tape_path(base).is_file():
                ys = np.cumsum(Tape.load(run.tape_path(base)).rewards)
                ax.plot(np.arange(1, len(ys) + 1), ys, color=f"C{k % 10}", linestyle="--",
                        alpha=0.6, label=f"baseline, seed {v.key.seed}")
            k += 1
        ax.set(xlabel="step", ylabel="cumulative reward",
               title=f"{task_name(task)}: cumulative reward of rendered episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    show(fig)
'''

_VIDEOS = '''\
for v in results.videos:
    if v.verified is True:
        check = "verified: the replay earned exactly what pass 1 earned"
    elif v.verified is False:
        check = "DIVERGED from pass 1: " + (v.get("divergence_text") or "see results.json")
    else:
        check = "not verified"
    print(f"{v.key.label}, {v.get('frames', '?')} frames, {check}")
    path = RUN / v.path if v.path else None
    if path is None or not path.exists():
        print(f"  no video: {v.error or 'the file is missing'}")
    elif getattr(by_suffix(path), "shown_as", None) == "img":  # a GIF
        display(Image(url=str(path)))
    elif path.is_dir():  # a folder of PNG frames: show the first
        frames = sorted(path.glob("frame_*.png"))
        if frames:
            display(Image(filename=str(frames[0])))
    else:
        display(Video(str(path), embed=False))
'''

_BRANCH = '''\
import json

from rolltape.outputs.branch_chart import branch_figure, summary_line

branched = sorted((RUN / "branch").glob("*/branch.json"))
if not branched:
    print(f"No episode was branched; run `rolltape branch {RUN}` (or `eval ... --branch`).")
for path in branched:
    try:
        record = json.loads(path.read_text())
        line, fig = summary_line(record), branch_figure(record)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"{path}: not a readable branch.json ({exc!r}); run `rolltape branch` again.")
        continue
    print(line)
    show(fig)
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
