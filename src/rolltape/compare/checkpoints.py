"""What ``--policy`` names, when it names several: policies, and globs of SB3 checkpoints.

SB3's ``CheckpointCallback`` saves ``<prefix>_<steps>_steps.zip`` (prefix ``rl_model`` by
default) and, with ``save_vecnormalize=True``, ``<prefix>_vecnormalize_<steps>_steps.pkl``
beside it. A glob of such files is ordered by training steps (not by name: 10000 sorts
before 9000 as text), and each checkpoint gets its own statistics file when the sweep has
them.

May import: errors. Never: policies, SB3 (nothing here loads a checkpoint).

>>> checkpoint_steps("ckpt/rl_model_12000_steps.zip")
12000
>>> checkpoint_steps("ckpt/final.zip") is None
True
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

from rolltape.errors import UsageError

__all__ = ["Entry", "checkpoint_steps", "expand_policies", "is_glob"]

_CHECKPOINT = re.compile(r"^(?P<prefix>.+)_(?P<steps>\d+)_steps\.zip$")


@dataclass(frozen=True)
class Entry:
    """One policy of a multi-policy run: its folder label, ``--policy`` source, statistics
    and training steps (None when it is not a numbered checkpoint)."""

    label: str
    policy: str
    vecnormalize: str | None = None
    steps: int | None = None


def checkpoint_steps(path: str | Path) -> int | None:
    """Training steps in a ``CheckpointCallback`` file name, or None."""
    match = _CHECKPOINT.match(Path(path).name)
    return int(match["steps"]) if match else None


def _stats_of(path: Path) -> Path | None:
    """The VecNormalize file CheckpointCallback saves beside checkpoint ``path``."""
    match = _CHECKPOINT.match(path.name)
    if not match:
        return None
    return path.with_name(f"{match['prefix']}_vecnormalize_{match['steps']}_steps.pkl")


def is_glob(source: str) -> bool:
    return any(c in source for c in "*?[")


def _label(source: str, steps: int | None) -> str:
    if steps is not None:
        return f"steps-{steps}"
    if source == "random":
        return "policy-random"  # "random" is the baseline's folder
    body = source.split(":", 1)[1] if source.startswith(("sb3:", "tape:")) else source
    if ":" in body and ".py:" not in body and not source.startswith(("sb3:", "tape:")):
        body = body.rpartition(":")[2]  # MODULE:ATTR: the attribute tells policies apart
    name = Path(body.rpartition(":")[0] if ".py:" in body else body).name  # FILE.py:ATTR
    stem = re.sub(r"\.(zip|npz|py)$", "", name) or "policy"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "policy"


def _expand_glob(pattern: str) -> list[Path]:
    found = [Path(p) for p in glob.glob(pattern) if Path(p).is_file()]
    if not found:
        raise UsageError(f"--policy 'sb3:{pattern}' matches no file; check the pattern (quote "
                         "it so the shell does not expand it).")
    # Numbered checkpoints by steps, any other file after them by name.
    return sorted(found, key=lambda p: (checkpoint_steps(p) is None, checkpoint_steps(p) or 0,
                                        p.name))


def expand_policies(policies: list[str], vecnormalize: str | None = None) -> list[Entry]:
    """One entry per policy, globs expanded and ordered by training steps.

    A checkpoint whose ``CheckpointCallback`` statistics file exists uses it; when some
    checkpoints of the list have one and another has not, that one is refused (its numbers
    would come from unnormalized observations). ``vecnormalize`` applies to every SB3
    entry without a statistics file of its own.
    """
    entries: list[Entry] = []
    for source in policies:
        if source.startswith("sb3:") and is_glob(source[4:]):
            paths = _expand_glob(source[4:])
        else:
            steps = checkpoint_steps(source[4:]) if source.startswith("sb3:") else None
            entries.append(Entry(_label(source, steps), source, None, steps))
            continue
        for path in paths:
            steps = checkpoint_steps(path)
            entries.append(Entry(_label(str(path), steps), f"sb3:{path}", None, steps))
    with_stats = {e.policy: _stats_of(Path(e.policy[4:])) for e in entries
                  if e.policy.startswith("sb3:")}
    present = [p for p in with_stats.values() if p is not None and p.is_file()]
    resolved = []
    for e in entries:
        own = with_stats.get(e.policy)
        if present and e.policy.startswith("sb3:") and (own is None or not own.is_file()):
            expected = own.name if own is not None else "its VecNormalize statistics"
            raise UsageError(f"Checkpoint '{e.policy[4:]}' has no '{expected}' beside it while "
                             f"the other checkpoints have theirs (e.g. '{present[0]}'); "
                             "restore that file or leave this checkpoint out.")
        stats = str(own) if own is not None and own.is_file() else (
            vecnormalize if e.policy.startswith("sb3:") else None)
        resolved.append(Entry(e.label, e.policy, stats, e.steps))
    return [Entry(label, e.policy, e.vecnormalize, e.steps)
            for e, label in zip(resolved, _distinct(resolved))]


def _distinct(entries: list[Entry]) -> list[str]:
    """Each entry's label, told apart where several share one: by the parts of their paths
    that differ (``steps-4096-run_a``, ``steps-4096-run_b``). A bare ``-2`` read as another
    step count (``steps-4096`` "better" than ``steps-4096-2``); the same file twice is
    ``-copy2``."""
    labels = [e.label for e in entries]
    for label in dict.fromkeys(labels):
        same = [k for k, x in enumerate(labels) if x == label]
        if len(same) < 2:
            continue
        parts = [Path(entries[k].policy.partition(":")[2] or entries[k].policy).with_suffix("")
                 .parts for k in same]
        width = max(len(p) for p in parts)
        padded = [("",) * (width - len(p)) + p for p in parts]  # aligned from the file name
        differ = [i for i in range(width) if len({p[i] for p in padded}) > 1]
        seen: dict[str, int] = {}
        for k, p in zip(same, padded):
            tail = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(p[i] for i in differ if p[i]))
            tail = tail.strip("-.")
            seen[tail] = seen.get(tail, 0) + 1
            if seen[tail] > 1 or not tail:
                tail = (tail + "-" if tail else "") + f"copy{seen[tail]}"
            labels[k] = f"{label}-{tail}"
    return labels
