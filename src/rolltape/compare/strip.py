"""One video across checkpoints: the same seed played by each checkpoint in turn, every
part verified on replay and labelled with its training steps.

Each checkpoint's tape of that seed is replayed by pass 2 (``rolltape.render``: resim, so
every part is checked against pass 1), then the parts are joined into one mp4 with the
checkpoint's steps and return written on its frames.

May import: rendering, pass2's encoder (video files only, no GL), compare.runs, errors,
executors.launch (a worker count).
Never: policies, pass 1, torch.

Example (not run: it renders):
    >>> make_strip(Path("runs/sweep"), checkpoints, "Hopper-v5", options={})
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.compare.runs import Key, LoadedRun
from rolltape.errors import UsageError
from rolltape.executors.launch import per_core

__all__ = ["make_strip", "pick_seed"]

STRIP = "strip.mp4"


def pick_seed(checkpoints: list[LoadedRun]) -> Key:
    """The seed of the last checkpoint's median episode: typical of where training got,
    neither its luckiest nor its worst start."""
    last = checkpoints[-1]
    played = [k for k in last.rows if last.rows[k].ret is not None] or list(last.rows)
    ranked = sorted(played, key=lambda k: (last.rows[k].ret or 0.0, k[2]))
    return ranked[(len(ranked) - 1) // 2]


def _label(frame: np.ndarray, text: str, short: str) -> np.ndarray:
    """``text`` on a dark band across the top of ``frame`` (``short`` when it is too
    narrow for the whole text)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=max(9, frame.shape[0] // 24))
    left, top, right, bottom = draw.textbbox((6, 4), text, font=font)
    if right > frame.shape[1] - 4:
        text = short
        left, top, right, bottom = draw.textbbox((6, 4), text, font=font)
    draw.rectangle((0, 0, frame.shape[1], bottom + 4), fill=(0, 0, 0))
    draw.text((6, 4), text, fill=(255, 255, 255), font=font)
    return np.asarray(image)


def make_strip(out: Path, checkpoints: list[LoadedRun], env: str | None, *,
               options: dict[str, Any]) -> dict[str, Any]:
    """Render ``out/strip.mp4`` from ``checkpoints`` (ordered by steps) on ``env`` (as the
    user named it; None for a suite run: the picked seed's task's env, as its manifest
    named it); returns what the comparison records about it (path, seed, labels,
    verified, problems)."""
    key = pick_seed(checkpoints)
    # The parts (and their sidecars) live in a hidden folder that goes when the strip is done.
    parts_dir = Path(tempfile.mkdtemp(prefix=".strip-parts-", dir=out))
    try:
        return _make(out, checkpoints, env, options, key, parts_dir)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)


def _task_env(run: LoadedRun, key: Key) -> tuple[str | None, float]:
    """The env id and reward tolerance of the task ``key`` belongs to, from the suite
    run's resolved manifest."""
    for t in (run.run.results.manifest or {}).get("tasks") or []:
        if (t.get("suite"), t.get("name")) == key[:2]:
            return t.get("env"), float(t.get("reward_atol") or 0.0)
    return None, 0.0


def _make(out: Path, checkpoints: list[LoadedRun], env: str | None, options: dict[str, Any],
          key: Key, parts_dir: Path) -> dict[str, Any]:
    import av

    from rolltape.pass2.encode import open_writer, read_frames
    from rolltape.pass2.request import RenderRequest
    from rolltape.rendering import render

    atol = options.get("atol") or 0.0
    if env is None:  # a suite: the task's env, verified to its tolerance, as eval's videos
        env, task_atol = _task_env(checkpoints[0], key)
        atol = max(atol, task_atol)
    requests = []
    for run in checkpoints:
        row = run.rows[key]
        requests.append(RenderRequest(
            tape=str(run.run.tape_path(row)), outputs=(str(parts_dir / f"{run.label}.mp4"),),
            mode="resim", width=options.get("width"), height=options.get("height"),
            cameras=tuple(options.get("cameras") or ()), layout=options.get("layout", "single"),
            quality=options.get("quality", "full"), overwrite=True, atol=atol,
            # Named by the user (or their manifest), as eval's own videos are.
            rtol=options.get("rtol") or 0.0, env_id=env))
    backends = options.get("backends") or ("egl", "osmesa")
    try:
        made = render(requests, backends=backends,
                      workers=per_core(options.get("render_workers") or 0))
    except UsageError as exc:
        return {"path": None, "seed": key[2], "labels": [], "verified": False,
                "problems": [str(exc)]}
    results = [r for r in made if r is not None]
    assert len(results) == len(made)  # render raises for a video it could not make
    problems = [f"{run.label}: diverged at {d.describe()}"  # verified False: it diverged
                for run, r in zip(checkpoints, results) if (d := r.divergence) is not None]
    labels = [f"{run.steps:,} steps" if run.steps is not None else run.label
              for run in checkpoints]
    with av.open(requests[0].outputs[0]) as first:
        fps = float(first.streams.video[0].average_rate or 30)
    with open_writer(out / STRIP, fps, overwrite=True) as writer:
        for run, label, req in zip(checkpoints, labels, requests):
            text = f"{label}   seed {key[2]}   return {run.rows[key].ret:.1f}"
            for frame in read_frames(req.outputs[0]):
                writer.write(_label(frame, text, label))
    return {"path": STRIP, "seed": key[2], "task": None if key[0] is None else
            f"{key[0]}/{key[1]}", "labels": labels,
            "verified": not problems and all(r.verified for r in results),
            "parts": [{"label": lab, "verified": r.verified, "frames": r.frames}
                      for lab, r in zip(labels, results)],
            "problems": problems}
