"""``rolltape export``: datasets from tapes against the loops a user would write instead
(``export_obs``: a bare gym.make + reset(seed) + step(actions) loop collecting the same
arrays; ``export_camera``: ``rolltape.render`` of the same episodes with the same camera,
then a conversion of its videos to LeRobot's AV1),
and the export's memory from a small to a large number of episodes (``export_rss``).

May import: bench.common; rolltape inside functions. Never: bench itself, a sibling module.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

import rolltape.bench.common as common


def _run(ctx: common.Context, episodes: int, steps: int) -> Path:
    """A random-policy HalfCheetah run of ``episodes`` x ``steps``, made once per bench run."""
    from rolltape.evaluation import evaluate

    key = ("export-run", episodes, steps)
    if key not in ctx.results:
        out = ctx.dir(f"export-run{episodes}x{steps}")
        evaluate(common.ENV_ID, "random", episodes=episodes, seed=common.SEED,
                 max_episode_steps=steps, out=out, overwrite=True, report=False)
        ctx.results[key] = {"path": str(out)}
    return Path(ctx.results[key]["path"])


def _sizes(ctx: common.Context) -> dict[str, int]:
    if ctx.config.quick:
        return {"episodes": 3, "steps": 50, "reps": 1, "cam_episodes": 2, "cam_steps": 20,
                "rss_small": 10, "rss_large": 40, "rss_steps": 10}
    # 100 episodes (the size export_rss starts from): with 20, a one-time cost of either
    # side (interpreter, imports: Minari's arrow storage brings pyarrow and pandas, ~1 s)
    # was most of what the ratio measured.
    return {"episodes": 100, "steps": 1000, "reps": 2, "cam_episodes": 4, "cam_steps": 200,
            "rss_small": 100, "rss_large": 1000, "rss_steps": 20}


def bench_export_obs(ctx: common.Context) -> dict[str, Any]:
    """Export to Minari (observations only) vs a bare replay loop collecting the same arrays
    in a fresh interpreter (A B B A ...)."""
    size = _sizes(ctx)
    run = _run(ctx, size["episodes"], size["steps"])
    runs: dict[str, list[float]] = {"export": [], "bare": []}
    for rep, who in common.interleaved(size["reps"], ("export", "bare")):
        folder = ctx.dir(f"export-obs-{who}")
        if who == "export":
            # A fresh interpreter, as `rolltape export` runs and as the bare loop runs.
            out, wall = common.run_child(export_obs_child, {
                "run": str(run), "out": str(folder), "dataset_id": f"bench-v{rep}"}, folder)
            runs[who].append(wall)
            assert out["episodes"] == size["episodes"] and not out["left_out"], out
        else:
            _, wall = common.run_child(bare_replay_child, {"run": str(run),
                                                          "out": str(folder / "bare.npz")}, folder)
            runs[who].append(wall)
    export_s, bare_s = common.median(runs["export"]), common.median(runs["bare"])
    steps = size["episodes"] * size["steps"]
    return common.result(
        title="export, observations only", ratio=bare_s / export_s, target=0.9, op=">=",
        ratio_of="bare loop seconds / rolltape export --to minari seconds (speed ratio; wall "
                 "time, process starts included on both sides)",
        baseline=f"bare gym.make+reset+step loop {bare_s:.2f} s",
        measured=f"rolltape export {export_s:.2f} s",
        raw={"episodes": size["episodes"], "steps": steps, "export_s": runs["export"],
             "bare_s": runs["bare"]},
        notes=[f"{size['episodes']} episodes x {size['steps']} steps of {common.ENV_ID}; export "
               "replays in a render worker per core, its default (verifying every step "
               "against the tape's digests) and writes a Minari dataset with minari itself; "
               "the bare loop, one process, steps the same actions and np.savez's the "
               "observations, actions and rewards; each side is a fresh interpreter"])


def export_obs_child(run: str, out: str, dataset_id: str) -> dict[str, Any]:
    """(In a fresh interpreter.) ``rolltape.export(run, to="minari")``, a render worker per
    core (its default)."""
    from rolltape.datasets import export

    done = export(run, to="minari", dataset_id=dataset_id, out=out)
    return {"episodes": done.episodes, "steps": done.steps, "left_out": done.left_out}


def bare_replay_child(run: str, out: str) -> dict[str, Any]:
    """(In a fresh interpreter.) gym.make + reset(seed) + step(actions) for every episode of
    ``run``, collecting observations, actions and rewards, saved to ``out``."""
    import gymnasium as gym
    import numpy as np

    from rolltape.record import Run
    from rolltape.tape import Tape

    record = Run.load(run)
    arrays: dict[str, Any] = {}
    env = None
    for episode in record.results.episodes:
        tape = Tape.load(record.tape_path(episode))
        if env is None:
            env = gym.make(common.ENV_ID, max_episode_steps=tape.length)
        obs, _ = env.reset(seed=tape.seed)
        observations, rewards = [obs], []
        for action in tape.actions:
            obs, reward, *_ = env.step(action)
            observations.append(obs)
            rewards.append(reward)
        k = episode.key.index
        arrays.update({f"obs{k}": np.stack(observations), f"actions{k}": tape.actions,
                       f"rewards{k}": np.asarray(rewards)})
    np.savez(out, **arrays)
    return {"episodes": len(record.results.episodes)}


def bench_export_camera(ctx: common.Context) -> dict[str, Any]:
    """Export to LeRobot with one camera vs what a user does without it: ``rolltape.render``
    the same episodes, then convert each video to LeRobot's AV1 (their own converter)."""
    from rolltape.datasets import export
    from rolltape.pass2.request import RenderRequest
    from rolltape.record import Run
    from rolltape.rendering import render

    cfg, size = ctx.config, _sizes(ctx)
    run = Run.load(_run(ctx, size["cam_episodes"], size["cam_steps"]))
    tapes = [str(run.tape_path(e)) for e in run.results.episodes]
    runs: dict[str, list[float]] = {"export": [], "render": [], "convert": []}
    for _, who in common.interleaved(size["reps"], ("export", "render")):
        folder = ctx.dir(f"export-camera-{who}")
        started = time.perf_counter()
        if who == "export":
            export(run, to="lerobot", out=folder / "ds", cameras=("default",),
                   width=cfg.width, height=cfg.height, backends=ctx.backends(), workers=1)
            runs[who].append(time.perf_counter() - started)
            continue
        videos = [folder / f"{k}.mp4" for k in range(len(tapes))]
        results = render([RenderRequest(t, (str(v),), width=cfg.width, height=cfg.height)
                          for t, v in zip(tapes, videos)], backends=ctx.backends(),
                         split=False)
        assert all(r is not None and r.verified for r in results)
        rendered = time.perf_counter()
        converted = sum(_to_lerobot_video(v, v.with_suffix(".av1.mp4")) for v in videos)
        runs["render"].append(rendered - started)
        runs["convert"].append(time.perf_counter() - rendered)
    export_s, render_s = common.median(runs["export"]), common.median(runs["render"])
    convert_s = common.median(runs["convert"])
    frames = size["cam_episodes"] * size["cam_steps"]
    codecs = _codec_cpu(videos[0], ctx.dir("export-codecs"))
    extra_s = frames * (codecs["av1_ms"] - codecs["h264_ms"]) / 1000
    return common.result(
        title="export with a camera", ratio=(render_s + convert_s) / export_s, target=0.9,
        op=">=",
        ratio_of="(rolltape render + converting its videos to LeRobot's AV1) seconds / "
                 "rolltape export --to lerobot --camera default seconds (speed ratio, one "
                 "render worker each)",
        baseline=f"render {render_s:.2f} s + convert {convert_s:.2f} s",
        measured=f"rolltape export {export_s:.2f} s",
        raw={"episodes": size["cam_episodes"], "steps": size["cam_steps"],
             "size": [cfg.width, cfg.height], "export_s": runs["export"],
             "render_s": runs["render"], "convert_s": runs["convert"],
             "converted_frames": converted,
             "render_alone_ratio": render_s / export_s, "codec_cpu_ms_per_frame": codecs,
             "av1_extra_cpu_s": extra_s},
        notes=[f"{size['cam_episodes']} episodes x {size['cam_steps']} steps at "
               f"{cfg.width}x{cfg.height}: the export writes AV1 as LeRobot encodes (SVT-AV1 "
               "preset 12, crf 30, g 2) plus the parquet files; render writes H.264 mp4 "
               "(libx264 veryfast), which the converter decodes and encodes again with "
               "LeRobot's settings on every core",
               f"against render alone {render_s / export_s:.3f}: the codecs alone, on "
               f"{codecs['frames']} of these frames, cost AV1 {codecs['av1_ms']:.1f} ms of "
               f"CPU a frame, H.264 {codecs['h264_ms']:.1f} ms; over the export's {frames} "
               f"frames AV1 costs {extra_s:.1f} s of CPU more, on {os.cpu_count()} core(s) "
               f"(export - render: {export_s - render_s:.1f} s)"])


#: HalfCheetah's render_fps: the frame rate of the bench's videos.
_FPS = 20


def _to_lerobot_video(video: Path, out: Path) -> int:
    """A user's converter: decode ``video`` and encode it as LeRobot does (its AV1 settings),
    the encoder on every core, as LeRobot's ``encode_video_frames`` leaves it by default;
    the number of frames converted."""
    from rolltape.pass2.encode import LEROBOT_AV1, open_av1_writer, read_frames

    params = f"{LEROBOT_AV1['svtav1-params']}:lp={os.cpu_count() or 1}"
    with open_av1_writer(out, _FPS, overwrite=True,
                         options={**LEROBOT_AV1, "svtav1-params": params}) as writer:
        for frame in read_frames(video):
            writer.write(frame)
    return writer.frames_written


def _codec_cpu(video: Path, folder: Path, count: int = 100) -> dict[str, float]:
    """CPU milliseconds a frame of encoding ``count`` frames of ``video`` as render does
    (H.264) and as an export does (LeRobot's AV1), each writer on its frames alone."""
    from itertools import islice

    from rolltape.pass2.encode import open_av1_writer, open_writer, read_frames

    frames = list(islice(read_frames(video), count))
    out: dict[str, float] = {"frames": len(frames)}
    for name, writer in (("h264_ms", open_writer(folder / "h264.mp4", _FPS, overwrite=True)),
                         ("av1_ms", open_av1_writer(folder / "av1.mp4", _FPS, overwrite=True))):
        started = time.process_time()  # the encoders' own threads count too
        with writer:
            for frame in frames:
                writer.write(frame)
        out[name] = (time.process_time() - started) * 1000 / max(1, len(frames))
    return out


def bench_export_rss(ctx: common.Context) -> dict[str, Any]:
    """Peak RSS of an export (its orchestrator, and the largest of its workers) of a small
    vs a large number of episodes, to Minari (observations) and to LeRobot with a camera:
    streaming keeps both flat. Judged: the larger growth."""
    size = _sizes(ctx)
    kinds = {"minari": {"steps": size["rss_steps"], "camera": False},
             # 2-step episodes at 64x64: what grows with the episode count, not the frames
             "lerobot_camera": {"steps": 2, "camera": True}}
    peaks: dict[str, dict[str, Any]] = {}
    for kind, how in kinds.items():
        mb = {}
        for name in ("rss_small", "rss_large"):
            run = _run(ctx, size[name], how["steps"])
            folder = ctx.dir(f"export-{kind}-{name}")
            peak, wall = common.run_child(export_rss_child, {
                "run": str(run), "out": str(folder), "camera": how["camera"]}, folder)
            peaks[f"{kind}/{name}"] = {**peak, "episodes": size[name], "seconds": wall}
            mb[name] = max(peak["self_mb"], peak["children_mb"])
        peaks[kind] = {"small_mb": mb["rss_small"], "large_mb": mb["rss_large"],
                       "growth_mb": mb["rss_large"] - mb["rss_small"]}
    worst = max(kinds, key=lambda kind: peaks[kind]["growth_mb"])
    small, large = peaks[worst]["small_mb"], peaks[worst]["large_mb"]
    return common.result(
        title="export memory", ratio=large / small, value=large - small, unit="MB",
        target=50.0, op="<=",
        ratio_of="peak RSS exporting the large run / the small run (judged: the difference, "
                 "the larger of Minari's and LeRobot-with-a-camera's)",
        baseline=f"{size['rss_small']} episodes: {small:.0f} MB ({worst})",
        measured=f"{size['rss_large']} episodes: {large:.0f} MB ({worst})", raw=peaks,
        notes=[f"--to minari: episodes of {size['rss_steps']} steps, +"
               f"{peaks['minari']['growth_mb']:.1f} MB; --to lerobot --camera default at "
               f"64x64: episodes of 2 steps, +{peaks['lerobot_camera']['growth_mb']:.1f} MB; "
               "peak RSS is the larger of "
               "the exporting process (its VmHWM) and its largest child (render worker, "
               "probe: ru_maxrss of its children)"])


def export_rss_child(run: str, out: str, camera: bool = False) -> dict[str, Any]:
    """(In a fresh interpreter.) Export ``run`` to Minari, or with ``camera`` to LeRobot
    with its default camera at 64x64; report peak RSS in MB."""
    from rolltape.datasets import export

    if camera:
        export(run, to="lerobot", out=Path(out) / "ds", cameras=("default",), width=64,
               height=64)
    else:
        export(run, to="minari", dataset_id="rss-v0", out=out)
    # This process's own peak (VmHWM: since its exec). Its ru_maxrss is not: Linux carries
    # the high-water mark over exec from the fork, so it was at least the bench process's
    # size when it started this child (~180 vs ~230 MB after the rows before it, while
    # the export itself peaks at ~135 MB either way).
    own = (common.peak_rss_kb(os.getpid()) or 0) / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"self_mb": own, "children_mb": children}
