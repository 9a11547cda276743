"""``rolltape diff RUN_A RUN_B``: why two evaluations of the same policy disagree.

First what differs in how the two runs were made (their protocol cards,
:mod:`rolltape.outputs.protocol`); then, walking the episodes both played (paired by
suite, task and seed), the first episode, step and field where they part and what the
data says it is (:mod:`rolltape.compare.classify`); then what that did to the numbers:
the episodes whose outcome differs and the paired change in success rate and return with
their intervals (:func:`rolltape.stats.paired_comparison`).

May import: compare.runs, compare.classify, outputs.protocol, record, tape, stats, errors,
flags; lazily compare.diff_videos (``--html``'s two videos, drawn by render workers).
Never: policies, pass 1, executors.

Example (not run: it reads two runs):
    >>> report = diff_runs("runs/mine", "runs/theirs")
    >>> report["verdict"]
    'no difference'
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from rolltape.errors import UsageError
from rolltape.flags import EPISODES, OUTPUT, flag

if TYPE_CHECKING:  # the reading itself loads when a diff runs (the CLI imports DiffConfig)
    from rolltape.compare.classify import Divergence
    from rolltape.compare.runs import Key
    from rolltape.tape import Tape


@dataclass(frozen=True, kw_only=True)
class DiffConfig:
    """What ``rolltape diff`` is asked for: two runs (or a run and a dataset), which
    episodes, and where the report also goes."""

    run_a: Path = flag(MISSING, "A run folder written by `rolltape eval`.", panel=EPISODES,
                       argument=True)
    run_b: Optional[Path] = flag(None, "Another run of the same env or suite, same seeds (or "
                                 "give --against).", panel=EPISODES, argument=True)
    episode: int | None = flag(None, "Only this episode index.", panel=EPISODES,
                               names=("--episode",))
    explain: bool = flag(False, "Say where every parting episode parts, not only the first.",
                         panel=OUTPUT, names=("--explain",))
    json_out: Optional[Path] = flag(None, "Also write the whole report to this file.",
                                    panel=OUTPUT, names=("--json",))
    html: Optional[Path] = flag(None, "Also write the page (diff.html) to this file.",
                                panel=OUTPUT, names=("--html",))
    against: Optional[Path] = flag(None, "A Minari dataset or a LeRobotDataset (its folder) "
                                   "to compare RUN_A's episodes with, paired by seed, instead "
                                   "of RUN_B.", panel=EPISODES, names=("--against",))


def diff(config: DiffConfig) -> dict[str, Any]:
    """The report of :func:`diff_runs`, also written where ``config`` asks (``--json``;
    ``--html``, with the first parting episode's two videos)."""
    report = diff_runs(config.run_a, config.run_b, episode=config.episode,
                       against=config.against)
    if config.json_out is not None:
        from rolltape.files import write_json

        write_json(config.json_out, report)
    if config.html is not None:
        from rolltape.compare.diff_videos import render_first

        write_page(report, config.html, render_first(report, config.html))
    return report


@dataclass
class Paired:
    """One episode both runs played: its key, its label, both outcomes and where the tapes
    part (None: equal)."""

    key: Key
    label: str
    index: int
    divergence: Divergence | None
    success: tuple[bool | None, bool | None]
    returns: tuple[float | None, float | None]

    @property
    def outcome_differs(self) -> bool:
        return self.success[0] != self.success[1]

    def to_json(self) -> dict[str, Any]:
        return {"suite": self.key[0], "task": self.key[1], "seed": self.key[2],
                "index": self.index, "label": self.label,
                "success": list(self.success), "returns": list(self.returns),
                "divergence": self.divergence.to_json() if self.divergence else None}


@dataclass
class Side:
    """One side of a diff: a run, or a dataset's episodes (:mod:`rolltape.compare.against`).
    ``episodes`` maps each key to (label, index, success by ``rule_of`` its task, return,
    a function that gives its tape)."""

    path: str
    card: dict[str, Any]
    unknown: list[str]
    episodes: dict[Key, tuple[str, int, bool | None, float | None, Callable[[], Tape]]]
    order: list[Key]  # the keys in the order they are walked (task order, then seed)
    silent: tuple[str, ...] = ()  # card fields (prefixes) this side cannot say (a dataset)
    tapes: dict[Key, str] = field(default_factory=dict)  # each key's tape file (a run's)


def run_side(path: str | os.PathLike[str], name: str) -> Side:
    """The run in ``path`` as a side (one UsageError when it is not a whole run)."""
    from rolltape.compare.runs import LoadedRun
    from rolltape.outputs.protocol import read_card

    run = LoadedRun.load(path, name)
    card, unknown = read_card(run.run)
    episodes = {k: (e.key.label, e.key.index, run.successes([k])[0], e.ret,
                    _tape_of(run.run.tape_path(e)))
                for k, e in run.rows.items()}
    return Side(str(run.path), card, unknown, episodes,
                [k for group in run.tasks().values() for k in group],
                tapes={k: str(run.run.tape_path(e)) for k, e in run.rows.items()})


def _tape_of(path: Path) -> Callable[[], Tape]:
    from rolltape.tape import Tape

    return lambda: Tape.load(path)


def _stored(load: Callable[[], Tape]) -> Callable[[], Tape]:
    from rolltape.compare.against import as_stored

    return lambda: as_stored(load())


def diff_runs(a_path: str | os.PathLike[str], b_path: str | os.PathLike[str] | None = None,
              episode: int | None = None, against: str | os.PathLike[str] | None = None
              ) -> dict[str, Any]:
    """Compare two runs, or a run and a dataset (``against``: a Minari or LeRobot dataset folder; see
    :mod:`rolltape.compare.against`); ``episode``: only that episode index. Returns a
    JSON-safe report; a folder that is not a whole run is one :class:`UsageError`."""
    a = run_side(a_path, "A")
    if (b_path is None) == (against is None):
        raise UsageError("give a second run (rolltape diff RUN_A RUN_B) or a dataset "
                         "(rolltape diff RUN --against DATASET), not both or neither.")
    if against is not None:
        from rolltape.compare.against import as_stored, dataset_side, is_lerobot

        b = Side(**dataset_side(against, a.card, a.order,
                                {k: e[2] is not None for k, e in a.episodes.items()}))
        if is_lerobot(Path(against)):  # the run as the dataset stores it (float32, one flag)
            a.episodes = {k: (label, index, success, as_stored(load()).total_return,
                              _stored(load))
                          for k, (label, index, success, _, load) in a.episodes.items()}
    else:
        assert b_path is not None
        b = run_side(b_path, "B")
    return diff_sides(a, b, episode)


def diff_sides(a: Side, b: Side, episode: int | None = None) -> dict[str, Any]:
    """The report of :func:`diff_runs` for two sides."""
    card_diffs, unknown = card_differences(a.card, b.card)
    silent = a.silent + b.silent  # said in `unknown` of that side, not differences
    card_diffs = {k: v for k, v in card_diffs.items() if not k.startswith(silent)} \
        if silent else card_diffs
    keys = [k for k in a.order if k in b.episodes]
    other = _other_envs(a.card, b.card)
    if other:  # the walk would compare two games: the card says enough
        keys = []
    if episode is not None:
        keys = [k for k in keys if a.episodes[k][1] == episode]
        if not keys:
            raise UsageError(f"--episode {episode}: neither side has an episode {episode} "
                             "that the other has too; give an index both played.")
    pairs = [_pair(a, b, k, card_diffs) for k in keys]
    only = {"A": sorted(str(k) for k in set(a.episodes) - set(b.episodes)),
            "B": sorted(str(k) for k in set(b.episodes) - set(a.episodes))} \
        if episode is None else {"A": [], "B": []}
    numbers = _numbers(pairs) if pairs else None
    first = next((p for p in pairs if p.divergence or p.outcome_differs), None)
    return {
        "other_envs": other,
        "a": a.path, "b": b.path,
        "card": {"differences": [{"field": f, "a": _plain(x), "b": _plain(y)}
                                 for f, (x, y) in card_diffs.items()],
                 # an older run's card lacks every env fact: said once, not per field
                 "not_compared": sorted(set(a.unknown) | set(b.unknown)) or unknown,
                 "a_has_card": not a.unknown, "b_has_card": not b.unknown,
                 "a_card": a.card, "b_card": b.card},
        "episodes": [p.to_json() for p in pairs],
        "paired": len(pairs), "only_in": only,
        "kinds": dict(Counter(p.divergence.kind for p in pairs if p.divergence)),
        "first": first.to_json() if first is not None else None,
        # its two tapes, for diff.html's videos (None: a dataset's side has no tape file)
        "first_tapes": [a.tapes.get(first.key), b.tapes.get(first.key)] if first else None,
        "numbers": numbers,
        "verdict": _verdict(pairs, card_diffs, only),
    }


def _other_envs(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """'Hopper-v5 vs Walker2d-v5' when a task both runs have is another env in each."""
    for label, env in (a.get("envs") or {}).items():
        theirs = (b.get("envs") or {}).get(label)
        if isinstance(env, dict) and isinstance(theirs, dict) and env.get("id") != theirs.get("id"):
            return f"{env.get('id')} vs {theirs.get('id')}"
    return None


def card_differences(a: dict[str, Any], b: dict[str, Any]
                     ) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """(card fields whose values differ, in A's order then B's; the facts one card cannot
    tell). A field one card lacks while the other has it (a suite task only one run has)
    is one difference for the whole part, not one per leaf; a fact only a pass-1 worker
    reads off its env (control rate, time limit, wrappers) that one card lacks (a served
    env's simulator is on its server; an older run) is not compared, and said so."""
    from rolltape.outputs.protocol import flatten

    fa, fb = dict(flatten(a)), dict(flatten(b))
    out: dict[str, tuple[Any, Any]] = {}
    unknown: list[str] = []
    for name in list(fa) + [k for k in fb if k not in fa]:
        x, y = fa.get(name, _ABSENT), fb.get(name, _ABSENT)
        if x == y:
            continue
        if x is _ABSENT or y is _ABSENT:
            name = _present_part(name, a if x is _ABSENT else b)
            x, y = _at(a, name), _at(b, name)
            parts = name.split(".")
            if len(parts) == 3 and parts[0] == "envs" and parts[2].split("[")[0] in _ENV_FACTS:
                said = f"{name} ({'A' if x is _ABSENT else 'B'}'s card does not say it)"
                if said not in unknown:
                    unknown.append(said)
                continue
            if name in out:
                continue
        out[name] = (x, y)
    return out, unknown


# What a pass-1 worker reads off the env it built (rolltape.pass1.facts).
_ENV_FACTS = ("horizon", "control", "env_wrappers", "render_fps", "observation", "action",
              "policy_observation", "policy_action")


_ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "not set",
                                   "__str__": lambda self: "not set"})()


def _plain(value: Any) -> Any:
    return None if value is _ABSENT else value


def _present_part(name: str, lacking: dict[str, Any]) -> str:
    """The longest prefix of the dotted ``name`` that the card ``lacking`` still has, plus
    one more part: where its absence begins."""
    parts = name.replace("[", ".[").split(".")
    node: Any = lacking
    for k, part in enumerate(parts):
        if isinstance(node, dict) and part in node:
            node = node[part]
            continue
        return ".".join(parts[:k + 1]).replace(".[", "[")
    return name


def _at(card: dict[str, Any], name: str) -> Any:
    node: Any = card
    for part in name.replace("[", ".[").split("."):
        if part.startswith("[") and isinstance(node, list):
            i = int(part[1:-1])
            node = node[i] if i < len(node) else _ABSENT
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _ABSENT
    return node


def _pair(a: Side, b: Side, key: Key, card_diffs: dict[str, tuple[Any, Any]]) -> Paired:
    from rolltape.compare.classify import Divergence, classify, first_divergence

    label, index, success_a, ret_a, tape_a = a.episodes[key]
    _, _, success_b, ret_b, tape_b = b.episodes[key]
    ta, tb = tape_a(), tape_b()
    success = (success_a, success_b)
    # The card fields of this episode's task (and those of the whole run), not other tasks'.
    task = "env" if key[0] is None else f"{key[0]}/{key[1]}"
    card_diffs = {k: v for k, v in card_diffs.items()
                  if not k.startswith("envs.") or k.startswith(f"envs.{task}.")}
    d = first_divergence(ta, tb)
    if d is not None:
        d = classify(d, ta, tb, card_diffs)
    elif success[0] != success[1]:
        rules = {k: v for k, v in card_diffs.items() if k.endswith(("success_rule", "success_key"))}
        said = "; the cards differ in " + ", ".join(f"{k} ({x} vs {y})" for k, (x, y)
                                                     in rules.items()) if rules else ""
        d = Divergence(ta.length - 1, "success", str(success[0]), str(success[1]),
                       "success_rule",
                       f"the same episode step for step, counted differently: A says "
                       f"{_outcome(success[0])}, B {_outcome(success[1])} (the success rule "
                       f"differs{said})")
    return Paired(key, label, index, d, success, (ret_a, ret_b))


def _outcome(success: bool | None) -> str:
    return {True: "success", False: "failure", None: "no success reported"}[success]


def _numbers(pairs: list[Paired]) -> dict[str, Any]:
    """What the differences did: episodes whose outcome differs, and the paired change in
    success rate and return (B - A) with their intervals."""
    from rolltape import stats

    both = [p for p in pairs if None not in p.returns]
    differs = [p.label for p in pairs if p.outcome_differs]
    out: dict[str, Any] = {"outcome_differs": len(differs), "outcome_differs_episodes": differs[:20],
                           "return_changed": sum(1 for p in pairs if p.returns[0] != p.returns[1])}
    if len(both) >= 2:
        rb = [float(p.returns[1]) for p in both]  # type: ignore[arg-type]
        ra = [float(p.returns[0]) for p in both]  # type: ignore[arg-type]
        sa = [p.success[0] for p in both]
        sb = [p.success[1] for p in both]
        reported = any(s is not None for s in sa) and any(s is not None for s in sb)
        comp = stats.paired_comparison(rb, ra, sb if reported else None,
                                       sa if reported else None, a_name="B", b_name="A")
        out["returns"] = {k: comp["returns"][k] for k in ("n_pairs", "a_mean", "b_mean",
                                                         "mean_diff", "diff_ci", "sentence")}
        # paired_comparison's "a" is B here: say the means the right way round.
        out["returns"]["a_mean"], out["returns"]["b_mean"] = \
            comp["returns"]["b_mean"], comp["returns"]["a_mean"]
        if comp["success"] is not None:
            s = comp["success"]
            out["success"] = {"a_rate": s["b_rate"], "b_rate": s["a_rate"], "diff": s["diff"],
                              "diff_ci": s["diff_ci"], "pvalue": s["pvalue"],
                              "sentence": s["sentence"]}
    return out


def _verdict(pairs: list[Paired], card_diffs: dict[str, tuple[Any, Any]],
             only: dict[str, list[str]]) -> str:
    """'no difference', 'rounding only', 'protocol only' or 'differs'."""
    from rolltape.outputs.protocol import EXECUTION

    made = [k for k in card_diffs if k.split(".")[0] not in EXECUTION
            and not k.startswith("policy.source")]
    parted = [p for p in pairs if p.divergence]
    if not pairs and made:
        return "differs"
    if not parted and not only["A"] and not only["B"]:
        return "no difference" if not made else "protocol only"
    if parted and all(p.divergence and p.divergence.kind == "rounding" for p in parted) \
            and not any(p.outcome_differs for p in pairs):
        return "rounding only"
    return "differs"


def write_page(report: dict[str, Any], path: str | os.PathLike[str],
               videos: dict[str, Any] | None = None) -> Path:
    """diff.html: the cards side by side with their differences marked, where each episode
    parts and what it is, and the numbers, in the run report's style (self-contained);
    ``videos``: the first diverging episode's two videos
    (:func:`rolltape.compare.diff_videos.render_first`), shown side by side."""
    import time

    from rolltape.files import write_text
    from rolltape.outputs.protocol import flatten
    from rolltape.outputs.report import render_page

    card = report["card"]
    fa, fb = dict(flatten(card["a_card"])), dict(flatten(card["b_card"]))
    differing = {d["field"] for d in card["differences"]}
    rows = [{"field": name, "a": _short(fa.get(name)), "b": _short(fb.get(name)),
             "differs": name in differing or any(name.startswith(f + ".") or
                                                 name.startswith(f + "[") for f in differing)}
            for name in list(fa) + [k for k in fb if k not in fa]]
    html = render_page("diff.html.j2", r=report, rows=rows, videos=videos,
                       written=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    return write_text(path, html)


def report_lines(report: dict[str, Any], explain: bool = False) -> list[str]:
    """The report as the CLI prints it."""
    lines = [f"A: {report['a']}", f"B: {report['b']}"]
    card = report["card"]
    if card["differences"]:
        lines.append(f"protocol card: {len(card['differences'])} difference(s)")
        for d in card["differences"]:
            lines.append(f"  {d['field']}: A {_short(d['a'])}, B {_short(d['b'])}")
    else:
        lines.append("protocol card: the same")
    for note in card["not_compared"]:
        lines.append(f"  not compared: {note}")
    if report["other_envs"]:
        lines.append(f"episodes: not walked: the runs evaluate other envs "
                     f"({report['other_envs']}); diff compares runs of the same env or suite")
        lines.append(f"verdict: {report['verdict']}")
        return lines
    for side in ("A", "B"):
        if report["only_in"][side]:
            lines.append(f"{len(report['only_in'][side])} episode(s) only in {side} (not compared)")
    parted = [e for e in report["episodes"] if e["divergence"]]
    counted = sum(1 for e in parted if e["divergence"]["kind"] == "success_rule")
    lines.append(f"episodes: {report['paired']} paired, {report['paired'] - len(parted) + counted} "
                 f"identical step for step, {len(parted) - counted} part"
                 + (f", {counted} identical but counted differently" if counted else ""))
    first = report["first"]
    if first is not None and first["divergence"]:
        d = first["divergence"]
        where = "the reset" if d["step"] is None else f"step {d['step']}"
        lines.append(f"first divergence: {first['label']}, {where}, {d['field']}: "
                     f"A {d['a']}, B {d['b']}")
        lines.append(f"  {d['kind']}: {d['sentence'] or 'differs; the data does not say why'}")
    if report["kinds"]:
        lines.append("kinds: " + ", ".join(f"{k} x{n}" for k, n in sorted(report["kinds"].items())))
    if explain:
        for e in parted[1:] if first is not None and first["divergence"] else parted:
            d = e["divergence"]
            where = "the reset" if d["step"] is None else f"step {d['step']}"
            lines.append(f"  {e['label']}: {where}, {d['field']} [{d['kind']}] {d['sentence']}")
    numbers = report["numbers"]
    if numbers is not None:
        lines.append(f"outcomes: {numbers['outcome_differs']} of {report['paired']} episode(s) "
                     f"differ in success; {numbers['return_changed']} in return")
        if "success" in numbers:
            s = numbers["success"]
            lo, hi = s["diff_ci"]
            lines.append(f"  success rate A {s['a_rate']:.0%}, B {s['b_rate']:.0%}: "
                         f"{s['diff'] * 100:+.1f} points (95% CI {lo * 100:+.1f} to "
                         f"{hi * 100:+.1f}, McNemar p = {s['pvalue']:.3g})")
        if "returns" in numbers:
            r = numbers["returns"]
            lo, hi = r["diff_ci"]
            lines.append(f"  mean return A {_num(r['a_mean'])}, B {_num(r['b_mean'])}: "
                         f"{_num(r['mean_diff'], True)} (paired 95% CI {_num(lo, True)} to "
                         f"{_num(hi, True)})")
    lines.append(f"verdict: {report['verdict']}")
    return lines


def _num(x: float | None, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:+.4g}" if sign else f"{x:.4g}"


def _short(value: Any) -> str:
    text = "(not set)" if value is None else repr(value)
    return text if len(text) <= 100 else text[:97] + "..."
