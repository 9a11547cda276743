"""``rolltape.evaluate``: pass 1 for the policy (and a random baseline), then pass 2 videos.

The orchestrator imports neither torch nor GL: the policy runs in a spawned pass-1 worker,
videos come from spawned render workers, and only files and small messages travel.

Example:
    >>> run = evaluate("HalfCheetah-v5", "sb3:ppo.zip", vecnormalize="vecnormalize.pkl",
    ...                episodes=30, seed=1000, baseline="random", video=2, out="runs/cheetah")
    >>> run.results["summary"]["policy"]["mean"]
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import stats
from .artifacts import (RESULTS_SCHEMA_VERSION, RunDir, append_jsonl, provenance, read_jsonl,
                        write_json)
from .backends import DEFAULT_ORDER, parse_backends
from .encode import format_from_path
from .envs import env_spec
from .errors import DivergenceError, UsageError
from .executors import describe_exit, spawn_worker, stop_worker
from .progress import Progress
from .render import MODES, RenderRequest, render
from .rollout import EpisodeJob, PolicyJob, policy_worker, tape_name

ON_DIVERGENCE = ("warn", "fail")


@dataclass(frozen=True)
class RunResult:
    """A finished run: where it is and what ``results.json`` says."""

    path: Path
    results: dict[str, Any]
    metadata: dict[str, Any]

    @property
    def diverged(self) -> list[dict[str, Any]]:
        return [v for v in self.results["videos"] if v.get("verified") is False]


def select_episodes(selection: int | str | Sequence[int], rows: list[dict[str, Any]]) -> list[int]:
    """Which episodes get a video: a count (the first N), 'all', 'best', 'worst', 'median',
    or explicit indices like '0,7,12'; several words may be joined with commas."""
    n = len(rows)
    if isinstance(selection, int):
        if selection < 0:
            raise UsageError(f"--video must be a count of 0 or more, got {selection}.")
        return list(range(min(selection, n)))
    if not isinstance(selection, str):
        picked = list(selection)
    else:
        picked = []
        text = selection.strip().lower()
        if text.isdigit():
            return list(range(min(int(text), n)))
        by_return = sorted(range(n), key=lambda i: (rows[i]["return"], i))
        for word in filter(None, (w.strip() for w in text.split(","))):
            if word == "all":
                picked.extend(range(n))
            elif word == "best":
                picked.append(by_return[-1])
            elif word == "worst":
                picked.append(by_return[0])
            elif word == "median":
                picked.append(by_return[(n - 1) // 2])
            elif word.lstrip("-").isdigit():
                picked.append(int(word))
            else:
                raise UsageError(f"--video '{selection}' is not understood; use a count, 'all', "
                                 "'best', 'worst', 'median' or episode indices like '0,3'.")
    for i in picked:
        if not 0 <= i < n:
            raise UsageError(f"--video asks for episode {i} but the run has episodes 0..{n - 1}.")
    return sorted(set(picked))


def evaluate(
    env: str,
    policy: str = "random",
    *,
    episodes: int = 10,
    seed: int = 0,
    out: str | Path = "runs/latest",
    baseline: str | None = None,
    vecnormalize: str | Path | None = None,
    algo: str | None = None,
    deterministic: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    video: int | str | Sequence[int] = 0,
    video_format: str = "mp4",
    width: int | None = None,
    height: int | None = None,
    camera: str | None = None,
    mode: str = "resim",
    backends: str | Sequence[str] = DEFAULT_ORDER,
    rtol: float = 0.0,
    atol: float = 0.0,
    on_divergence: str = "warn",
    render_timeout: float = 120.0,
    overwrite: bool = False,
    resume: bool = False,
    show_progress: bool = False,
    command: list[str] | None = None,
) -> RunResult:
    """Evaluate ``policy`` on ``env`` for ``episodes`` episodes (seeds ``seed + i``).

    Every number comes from pass 1 (rendering off). ``video`` picks episodes to render in
    pass 2, where each replay is verified against pass 1. Writes ``results.json``,
    ``episodes.jsonl``, ``metadata.json``, ``tapes/`` and ``videos/`` under ``out``.
    """
    # -- check everything we can before any work -------------------------------------
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}.")
    if baseline not in (None, "random"):
        raise UsageError(f"--baseline '{baseline}' is not supported; use 'random' or leave it off.")
    if on_divergence not in ON_DIVERGENCE:
        raise UsageError(f"--on-divergence must be one of {', '.join(ON_DIVERGENCE)}.")
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, got '{mode}'.")
    if rtol < 0 or atol < 0:
        raise UsageError("--rtol and --atol must be 0 or more.")
    format_from_path(f"x.{video_format}")
    backend_order = parse_backends(backends)
    for path, what in ((policy[4:] if policy.startswith("sb3:") else policy, "Checkpoint"),
                       (vecnormalize, "VecNormalize statistics")):
        if path and str(path).endswith((".zip", ".pkl")) and not Path(path).is_file():
            raise UsageError(f"{what} '{path}' does not exist; check the path.")
    spec = env_spec(env, env_kwargs, max_episode_steps)
    wants_video = video not in (0, "0", "", "none", None) and not (
        isinstance(video, (list, tuple)) and not video)

    run = RunDir(out, overwrite=overwrite, resume=resume)
    try:
        return _run(run, spec, policy, episodes, seed, baseline, vecnormalize, algo,
                    deterministic, video if wants_video else 0, video_format, width, height,
                    camera, mode, backend_order, rtol, atol, on_divergence, render_timeout,
                    show_progress, command)
    except UsageError:
        if not run.resumed:
            run.discard()
        raise


def _run(run: RunDir, spec: dict[str, Any], policy: str, episodes: int, seed: int,
         baseline: str | None, vecnormalize: Any, algo: str | None, deterministic: bool,
         video: Any, video_format: str, width: int | None, height: int | None,
         camera: str | None, mode: str, backends: tuple[str, ...], rtol: float, atol: float,
         on_divergence: str, render_timeout: float, show_progress: bool,
         command: list[str] | None) -> RunResult:
    root = run.path
    warnings: list[str] = []
    timings: dict[str, float] = {}
    jsonl = root / "episodes.jsonl"
    done = {(r["role"], r["index"]): r for r in read_jsonl(jsonl)
            if (root / r["tape"]).is_file()}
    roles = [("policy", policy)] + ([("baseline", "random")] if baseline else [])
    jobs = []
    for role, source in roles:
        todo = [EpisodeJob(role, i, seed + i, f"tapes/{tape_name(role, i)}")
                for i in range(episodes) if (role, i) not in done]
        if todo:
            jobs.append(PolicyJob(env=spec, policy=source, episodes=todo,
                                  vecnormalize=str(vecnormalize) if role == "policy" and vecnormalize else None,
                                  algo=algo if role == "policy" else None,
                                  deterministic=deterministic if role == "policy" else False,
                                  needs_rgb_array=bool(video)))
    # Kept in the run so that a resumed run still knows what produced its tapes.
    described = root / "policies.json"
    descriptions: dict[str, dict[str, Any]] = (
        json.loads(described.read_text()) if described.is_file() else {})
    total = sum(len(j.episodes) for j in jobs)
    with Progress(show_progress) as bar:
        started = time.perf_counter()
        if jobs:
            # Tape paths are relative to the run; the worker writes into the staging folder.
            worker_jobs = [PolicyJob(**{**j.__dict__, "episodes": [
                EpisodeJob(e.role, e.index, e.seed, str(root / e.tape_path)) for e in j.episodes]})
                for j in jobs]
            task = bar.add("pass 1 (policy, rendering off)", total)
            # Pass 1 never renders: no GL variable reaches the policy process.
            worker = spawn_worker(policy_worker, worker_jobs,
                                  env={"MUJOCO_GL": None, "PYOPENGL_PLATFORM": None})
            conn = worker.conn
            try:
                while True:
                    try:
                        kind, payload = conn.recv()
                    except EOFError:
                        worker.proc.wait(5)
                        raise RuntimeError("The pass-1 worker "
                                           f"{describe_exit(worker.proc.returncode)}.") from None
                    if kind == "episode":
                        payload["tape"] = str(Path(payload["tape"]).relative_to(root))
                        append_jsonl(jsonl, payload)
                        done[(payload["role"], payload["index"])] = payload
                        bar.advance(task)
                    elif kind == "policy":
                        descriptions[payload.pop("role")] = payload
                        write_json(described, descriptions)
                    elif kind == "usage_error":
                        raise UsageError(payload)
                    elif kind == "error":
                        raise RuntimeError(f"Pass 1 failed: {payload}")
                    elif kind == "done":
                        warnings.extend(f"MuJoCo: {w}" for w in payload)
                        break
            finally:
                stop_worker(worker)
        timings["pass1_s"] = time.perf_counter() - started

        rows = {role: [done[(role, i)] for i in range(episodes)] for role, _ in roles}
        results = _results(spec, rows, descriptions, episodes, seed)
        write_json(root / "results.json", results)

        videos: list[dict[str, Any]] = []
        if video:
            picked = select_episodes(video, rows["policy"])
            requests = [RenderRequest(
                tape=str(root / rows["policy"][i]["tape"]),
                outputs=(str(root / "videos" / f"policy-{i:04d}.{video_format}"),),
                mode=mode, width=width, height=height, camera=camera, rtol=rtol, atol=atol,
                overwrite=True) for i in picked]
            lengths = [rows["policy"][i]["length"] + 1 for i in picked]
            task = bar.add(f"pass 2 (render {len(picked)} video(s))", sum(lengths))
            seen = [0] * len(picked)

            def on_progress(k: int, frames: int) -> None:
                seen[k] = frames
                bar.update(task, sum(seen))

            def on_result(k: int, result: Any) -> None:
                seen[k] = lengths[k]
                bar.update(task, sum(seen))

            started = time.perf_counter()
            try:
                rendered = render(requests, backends=backends, timeout=render_timeout,
                                  on_progress=on_progress, on_result=on_result)
            except UsageError as exc:
                rendered = [None] * len(requests)
                warnings.append(str(exc))
            timings["pass2_s"] = time.perf_counter() - started
            for i, result in zip(picked, rendered):
                entry = {"index": i, "seed": rows["policy"][i]["seed"]}
                if result is None:
                    entry.update(path=None, verified=None, error="not rendered")
                else:
                    entry.update(result.to_dict())
                    entry["path"] = str(Path(result.outputs[0]).relative_to(root))
                    entry["tape"] = rows["policy"][i]["tape"]
                    entry.pop("outputs", None)
                    warnings.extend(f"MuJoCo: {w}" for w in entry.pop("warnings")
                                    if f"MuJoCo: {w}" not in warnings)
                    if result.divergence is not None:
                        warnings.append(f"Episode {i} diverged on replay at "
                                        f"{result.divergence.describe()}.")
                videos.append(entry)
    results["videos"] = videos
    results["warnings"] = warnings
    write_json(root / "results.json", results)
    backends_used = sorted({v["backend"] for v in videos if v.get("backend")})
    metadata = {
        **provenance(command),
        "schema_version": RESULTS_SCHEMA_VERSION,
        "env": spec,
        "policy": descriptions.get("policy"),
        "baseline": descriptions.get("baseline"),
        "checkpoint_sha256": (descriptions.get("policy") or {}).get("sha256"),
        "vecnormalize_sha256": (descriptions.get("policy") or {}).get("vecnormalize_sha256"),
        "seeds": {"base": seed, "episodes": [seed + i for i in range(episodes)]},
        "render": {"backends_tried": list(backends), "backend_used": backends_used or None,
                   "mode": mode, "width": width, "height": height, "camera": camera,
                   "failures": [f for v in videos for f in v.get("failures", [])]},
        "timings": timings,
        "warnings": warnings,
        "resumed": run.resumed,
    }
    write_json(root / "metadata.json", metadata)
    final = run.commit()
    outcome = RunResult(final, results, metadata)
    if any(v.get("path") is None for v in videos):
        raise UsageError(f"{warnings[-1]} The numbers were kept in '{final}/results.json'.")
    if on_divergence == "fail" and outcome.diverged:
        raise DivergenceError(f"{len(outcome.diverged)} replay(s) diverged from pass 1: "
                              + " ".join(w for w in warnings if "diverged" in w))
    return outcome


def _results(spec: dict[str, Any], rows: dict[str, list[dict[str, Any]]],
             descriptions: dict[str, Any], episodes: int, seed: int) -> dict[str, Any]:
    """results.json: a summary per role, the improvement over the baseline, every episode."""
    summary = {role: stats.summarize([r["return"] for r in rs], [r["success"] for r in rs]).to_dict()
               for role, rs in rows.items()}
    for role, rs in rows.items():
        summary[role]["mean_length"] = sum(r["length"] for r in rs) / len(rs)
    improvement = None
    if "baseline" in rows:
        improvement = stats.paired_improvement([r["return"] for r in rows["policy"]],
                                               [r["return"] for r in rows["baseline"]])
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "env_id": spec["id"],
        "env": spec,
        "policy": descriptions.get("policy"),
        "episodes": episodes,
        "seed": seed,
        "summary": summary,
        "improvement_over_baseline": improvement,
        "episodes_rows": rows["policy"],
        "baseline_rows": rows.get("baseline", []),
        "videos": [],
        "warnings": [],
    }
