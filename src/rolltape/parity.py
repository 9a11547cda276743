"""``rolltape parity``: the same seeded episodes locally and on a server, compared whole.

Each episode is played to its end on a local env and on a served session, with the same
policy reset with the same seed, through pass 1's own :func:`record_episode`; then every
step's observation digest, action, reward (bit for bit), terminated/truncated flag and
MuJoCo physics state, the success flag, the length, and the terminal frame (drawn by the
same code on both sides, byte-equal on the same GL backend) are compared. The first
difference is named: episode, step, field, both values. With ``--policy ws://...
--local-policy SOURCE`` a served policy is compared with the same policy loaded here
instead (:mod:`rolltape.policy_parity`).

:class:`ParityConfig` is everything the verb was asked for (composed from the shared
groups of :mod:`rolltape.groups`; each field's rule and the rules between fields are
checked on construction) and :func:`check_parity` runs the check: the command line builds
the record and calls it, as the Python API does. The comparison runs in a spawned worker
(it loads the policy and draws with GL); :func:`parity_worker` is its entry point.

It sits beside the orchestrator (it uses the wire, :mod:`rolltape.server`, and pass 1).

May import: envs, policies, pass1.rollout, server.*, policy_server.wire, policy_parity,
address, files, flags, groups, errors, executors.launch (lazily: to spawn the worker),
outputs.artifacts (its refusal to replace a file), pass2.request (render's frame flags).
Never: the rest of pass 2, the rest of outputs. The work's modules are imported inside the functions that use them, so that
importing this module (every `rolltape` command does, for the record's flags) stays light.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, List, Optional

import numpy as np

from rolltape.errors import DivergenceError, UsageError
from rolltape.flags import EPISODES, POLICY, VIDEO, at_least, check_flags, flag
from rolltape.groups import (
    EnvOptions,
    Episodes,
    PolicyFiles,
    PolicySource,
    RunFolder,
    Served,
    Suite,
)
from rolltape.pass2.request import RenderOptions

PARITY_TIMEOUT = 600.0  # seconds the parity worker may go without finishing an episode
DEFAULT_OUT = "parity.json"


def _render_flag(name: str) -> Any:
    """A field declared as the render side's flag ``name`` is (its default, help, panel
    and names): one declaration, offered by both verbs."""
    declared = next(f for f in fields(RenderOptions) if f.name == name)
    if declared.default_factory is not MISSING:
        return field(default_factory=declared.default_factory, metadata=declared.metadata)
    return field(default=declared.default, metadata=declared.metadata)


@dataclass(frozen=True, kw_only=True)
class ParityConfig(Episodes, EnvOptions, Suite, Served, PolicySource, PolicyFiles,
                   RunFolder):
    """Everything ``rolltape parity`` was asked for. ``out`` None is ``parity.json``;
    with ``tapes``, ``episodes`` is their number. Refuses what cannot be compared in one
    sentence, before any server is asked anything."""

    env: str | None = flag(None, "The local env id (HalfCheetah-v5); leave it out with "
                                 "--suite and --task.", panel=EPISODES, argument=True)
    task: str | None = flag(None, "With --suite: the task (name or suite/task).",
                            panel=EPISODES)
    tapes: tuple[str, ...] = flag(
        (), "Replay this tape's actions from its seed (repeatable), instead of --policy on "
        "--episodes seeds.", panel=EPISODES, names=("--tape",), factory=tuple,
        cli_type=Optional[List[Path]], cli_default=None,
        parse=lambda paths: tuple(str(p) for p in paths))
    local_policy: str | None = flag(
        None, "With --policy ws://HOST:PORT: the same policy loaded here (sb3:PATH.zip, "
        "MODULE:ATTR, ...); compares their actions on the same observations.", panel=POLICY)
    batch_size: int = flag(  # not eval's --batch (episodes per look with --until)
        1, "With --policy ws://: ask the served policy for each action within a batch of "
        "this many observations (one forward pass), to see whether batching changes its "
        "actions.", panel=POLICY, rule=at_least(1))
    # The compared terminal frame is drawn as render draws one: render's flags, as declared
    # there (one camera: the env's own view, or a model camera).
    width: int | None = _render_flag("width")
    height: int | None = _render_flag("height")
    cameras: tuple[str, ...] = _render_flag("cameras")
    frames: bool = flag(True, "Compare the rendered terminal frames.", panel=VIDEO)

    @property
    def source(self) -> str:
        """The policy played on both sides (random unless --policy)."""
        return self.one_policy("random") or "random"

    def __post_init__(self) -> None:
        from rolltape.outputs.artifacts import refuse_existing
        from rolltape.server.frames import check_size

        check_flags(self)
        for tape in self.tapes:
            if not Path(tape).is_file():
                raise UsageError(f"--tape '{tape}' does not exist; give a tape file (.npz).")
        if self.tapes and self.source != "random":
            raise UsageError("--tape replays tapes' actions; drop --policy, or drop --tape.")
        if self.tapes:
            object.__setattr__(self, "episodes", len(self.tapes))
        if len(self.cameras) > 1 or any(c == "free" or c.startswith("track:")
                                        for c in self.cameras):
            raise UsageError(f"parity compares one terminal frame, from the env's own view or "
                             f"a model camera: give at most one --camera NAME, not "
                             f"{', '.join(self.cameras)}.")
        try:  # unset sides are the env's own size, checked where the env is built
            check_size(1 if self.width is None else self.width,
                       1 if self.height is None else self.height, self.camera)
        except UsageError as exc:
            raise UsageError(f"--width/--height/--camera: {exc}.") from None
        if self.out is None:
            object.__setattr__(self, "out", DEFAULT_OUT)
        if Path(str(self.out)).is_dir():
            raise UsageError(f"--out '{self.out}' is a folder; give the path of parity.json.")
        refuse_existing(str(self.out), self.overwrite)  # as render refuses a video

    @property
    def camera(self) -> str | None:
        """The model camera of the terminal frame (None: the env's own view)."""
        named = [c for c in self.cameras if c != "default"]
        return named[0] if named else None


def check_parity(cfg: ParityConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """``rolltape parity``: play ``cfg``'s episodes locally and served (an env server with
    ``served``, a policy server with ``policy`` ws://... and ``local_policy``), write
    ``cfg.out`` and return its content; raise :class:`DivergenceError` naming the first
    difference. ``say`` hears each episode (unless ``quiet``) and the verdict."""
    from rolltape.policy_server.wire import is_policy_source, with_options

    policy = with_options(cfg.source, cfg.execute_steps, None)
    shown = (lambda line: None) if cfg.quiet else say
    if cfg.local_policy is not None or is_policy_source(policy):
        return _policy_parity(cfg, policy, say, shown)
    if cfg.batch_size != 1:
        raise UsageError("--batch-size compares a served policy's batched actions: give "
                         "--policy ws://HOST:PORT and --local-policy SOURCE with it.")
    spec = _served_spec(cfg)
    return _env_parity(cfg, spec, say, shown)


def _served_spec(cfg: ParityConfig) -> dict[str, Any]:
    """The served spec parity compares: ``env`` on the server, or one suite task."""
    from rolltape.address import parse_server
    from rolltape.envs.ids import env_spec

    if cfg.served is None:
        raise UsageError("Give the env server as --served tcp://HOST:PORT, or a policy "
                         "server as --policy ws://HOST:PORT with --local-policy SOURCE.")
    address = parse_server(cfg.served)
    if cfg.suite is not None or cfg.task is not None:
        return _suite_task_spec(cfg, address)
    if cfg.env is None:
        raise UsageError("Give the local env id (rolltape parity HalfCheetah-v5 --served "
                         "tcp://HOST:PORT), or --suite and --task for a suite server.")
    if cfg.env.startswith("tcp://"):
        raise UsageError("Give the local env id as ENV and the server as --served "
                         "tcp://HOST:PORT.")
    return env_spec(f"{address}/{cfg.env}", cfg.env_kwargs, cfg.max_episode_steps)


def _suite_task_spec(cfg: ParityConfig, address: str) -> dict[str, Any]:
    """The served spec of one suite task, resolved as ``serve --suite`` resolves it."""
    from rolltape.address import served_task_spec
    from rolltape.server.server import ServeConfig

    if cfg.suite is None or cfg.task is None:
        raise UsageError("--suite and --task go together: parity compares one task of a "
                         "suite (e.g. --suite mazes --task umaze).")
    if cfg.env is not None or cfg.env_kwargs:
        raise UsageError(f"Give either ENV or --suite with --task ('{cfg.task}'), not both: "
                         "the suite names the task's env and its kwargs.")
    specs = ServeConfig(suite=cfg.suite, tasks=cfg.task,
                        max_episode_steps=cfg.max_episode_steps).served_specs("--task")
    if len(specs) != 1:
        raise UsageError(f"--task names one task; '{cfg.task}' picks {len(specs)} "
                         f"({', '.join(specs)}).")
    [(name, local)] = specs.items()
    return served_task_spec(local, address, name)


def _env_parity(cfg: ParityConfig, spec: dict[str, Any], say: Callable[[str], None],
                shown: Callable[[str], None]) -> dict[str, Any]:
    """The served env against the local one (:func:`run_parity`, in a worker)."""
    from rolltape.files import write_json
    from rolltape.server.client import describe, served_difference
    from rolltape.server.protocol import difference_sentence

    out = str(cfg.out)
    described = describe(spec)
    diff = served_difference(spec, described["descriptor"])
    if diff is not None:  # a divergence before any step: named like the others
        write_json(out, {"env": spec, "server": spec["served"]["address"], "agree": False,
                         "first_divergence": {"episode": None, "seed": None, "step": None,
                                              **diff}, "rows": []})
        raise DivergenceError(f"parity: {difference_sentence(diff)}; see {out}.")
    backend = described.get("backend") if described.get("physics") else None
    frames = cfg.frames and backend is not None
    options = {"policy": cfg.source, "episodes": cfg.episodes, "seed": cfg.seed,
               "vecnormalize": cfg.vecnormalize, "algo": cfg.algo, "width": cfg.width,
               "height": cfg.height, "camera": cfg.camera, "frames": frames,
               "tapes": list(cfg.tapes) or None}

    def episode(row: dict[str, Any]) -> None:
        mark = "agree" if row["agree"] else f"differ ({row['first_difference']['field']})"
        shown(f"episode {row['episode']} (seed {row['seed']}, {row['length']} steps): "
              f"{mark}")

    result = _run_worker(parity_worker, spec, options, backend, episode)
    result["frames"]["backend"] = backend
    if spec["served"].get("name") is not None:  # a suite server's task
        result["task"] = spec["served"]["name"]
    write_json(out, result)
    if result["agree"]:
        compared = ", physics" if described.get("physics") else ""
        compared += ", terminal frames" if frames else ""
        say(f"parity: {cfg.episodes} episode(s) agree bit for bit (observations, actions, "
            f"rewards, flags{compared}); wrote {out}")
        return result
    d = result["first_divergence"]
    where = (f"episode {d['episode']} (seed {d['seed']}) step {d['step']}"
             if d["episode"] is not None else "after the episodes")
    raise DivergenceError(f"parity: the served env diverged at {where} in {d['field']}: "
                          f"local {d['local']}, served {d['served']}; see {out}.")


def _policy_parity(cfg: ParityConfig, policy: str, say: Callable[[str], None],
                   shown: Callable[[str], None]) -> dict[str, Any]:
    """``--policy ws://... --local-policy SOURCE ENV``: a served policy against the same
    policy loaded here (:mod:`rolltape.policy_parity`), in a worker."""
    from rolltape.envs.ids import env_spec
    from rolltape.files import write_json
    from rolltape.policy_parity import policy_parity_worker
    from rolltape.policy_server.client import check_policy_server
    from rolltape.policy_server.wire import is_policy_source

    if not is_policy_source(policy) or cfg.local_policy is None:
        raise UsageError("Policy parity compares a served policy with a local one: give "
                         "--policy ws://HOST:PORT and --local-policy SOURCE together.")
    if cfg.served is not None or cfg.env is None or cfg.env.startswith("tcp://"):
        raise UsageError("Policy parity plays a local env: give its id as ENV (e.g. "
                         "HalfCheetah-v5), without --served.")
    spec = env_spec(cfg.env, cfg.env_kwargs, cfg.max_episode_steps)
    check_policy_server(policy)  # there, before the worker loads anything
    options = {"policy": policy, "local_policy": cfg.local_policy, "episodes": cfg.episodes,
               "seed": cfg.seed, "vecnormalize": cfg.vecnormalize, "algo": cfg.algo,
               "batch": cfg.batch_size}

    def episode(row: dict[str, Any]) -> None:
        mark = ("agree" if row["first_difference"] is None else
                f"differ from step {row['first_difference']['step']}")
        outcome = "; the outcome differs" if row["outcome_differs"] else ""
        shown(f"episode {row['episode']} (seed {row['seed']}, {row['length']} steps): "
              f"{mark}{outcome}")

    result = _run_worker(policy_parity_worker, spec, options, None, episode)
    out = str(cfg.out)
    write_json(out, result)
    within = (f" (asked within batches of {cfg.batch_size})" if cfg.batch_size > 1
              else "")
    if result["agree"]:
        say(f"parity: {cfg.episodes} episode(s), {result['steps']} steps: the served "
            f"policy's actions{within} equal the local policy's bit for bit, 0 differing "
            f"steps; wrote {out}")
        return result
    first = result["first_difference"]
    where = (f"first at episode {first['episode']} (seed {first['seed']}) step "
             f"{first['step']}, dimension {first['dimension']}" if first else
             "in no action")
    outcomes = (f"; the outcome of episode(s) {result['outcomes_differ']} differs"
                if result["outcomes_differ"] else "; no episode's outcome differs")
    raise DivergenceError(f"parity: the served policy's actions{within} differ at "
                          f"{result['differing_steps']} of {result['steps']} steps, {where}, "
                          f"largest difference {result['max_abs_diff']:.3g}{outcomes}; see "
                          f"{out}.")


def _run_worker(entry: Callable[..., None], spec: dict[str, Any], options: dict[str, Any],
                backend: str | None, episode: Callable[[dict[str, Any]], None]
                ) -> dict[str, Any]:
    """Run ``entry`` (:func:`parity_worker` or the policy parity's) in a spawned worker (it
    loads the policy and draws with GL); ``episode`` hears each episode's row."""
    from rolltape.errors import RunFailed
    from rolltape.executors.launch import spawn_worker, stop_worker

    env: dict[str, str | None] = {"MUJOCO_GL": None, "PYOPENGL_PLATFORM": None}
    if backend:
        from rolltape.pass2.backends import gl_environment

        env.update(gl_environment(backend))
    worker = spawn_worker(entry, spec, options, env=env)
    try:
        while True:
            if not worker.conn.poll(PARITY_TIMEOUT):
                raise RunFailed(f"The parity worker finished no episode in "
                                f"{PARITY_TIMEOUT:g} s; is the env or the server hung?")
            try:
                kind, payload = worker.conn.recv()
            except EOFError:
                raise RunFailed("The parity worker died; rerun to see whether it happens "
                                "again.") from None
            if kind == "episode":
                episode(payload)
            elif kind == "result":
                return payload
            elif kind == "usage_error":
                raise UsageError(payload)
            else:
                raise RunFailed(f"The parity check stopped: {payload}")
    finally:
        stop_worker(worker)
        sys.stdout.flush()


def open_sessions(spec: dict[str, Any]) -> int:
    """How many sessions the server has open now."""
    from rolltape.server.client import connect, expect_ok

    conn = connect(spec)
    try:
        return int(expect_ok(conn.call("stats"), spec["served"]["address"], "stats")["sessions"])
    finally:
        conn.close()


def _same(a: Any, b: Any) -> bool:
    """Bit for bit (NaN equals NaN, -0.0 differs from 0.0)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _show(value: Any) -> Any:
    value = np.asarray(value)
    if value.size > 12:
        return f"{value.dtype} array {list(value.shape)} (sha of bytes differs)"
    return value.tolist()


def compare_episode(local: dict[str, Any], served: dict[str, Any]) -> dict[str, Any] | None:
    """The first difference between two episodes' tape fields, or None. ``step`` k is the
    k-th ``env.step`` (0 is the reset): its action, reward and flags, then the observation
    digest and physics state it led to."""
    steps = min(len(local["rewards"]), len(served["rewards"]))
    for k in range(steps + 1):
        names = (("actions", "rewards", "terminated", "truncated") if k else ()) + \
            ("obs_digest", "physics")
        for name in names:
            row = k - 1 if name not in ("obs_digest", "physics") else k
            a, b = local[name], served[name]
            if a is None or b is None:
                if (a is None) != (b is None):
                    return {"step": k, "field": name, "local": a is not None,
                            "served": b is not None}
                continue
            if not _same(a[row], b[row]):
                return {"step": k, "field": name, "local": _show(a[row]),
                        "served": _show(b[row])}
    if len(local["rewards"]) != len(served["rewards"]):
        return {"step": steps, "field": "length", "local": len(local["rewards"]),
                "served": len(served["rewards"])}
    for name in ("success_at_end", "success_once"):
        if local[name] != served[name]:
            return {"step": steps, "field": name, "local": local[name],
                    "served": served[name]}
    return None


def run_parity(spec: dict[str, Any], policy_source: str, episodes: int, seed: int, *,
               vecnormalize: str | None = None, algo: str | None = None,
               deterministic: bool = True, width: int | None = None,
               height: int | None = None, camera: str | None = None, frames: bool = True,
               tapes: list[str] | None = None, on_episode: Any = None) -> dict[str, Any]:
    """Play ``episodes`` episodes (seed + i) locally and served, or with ``tapes`` each
    tape's actions from its own seed and options; return the parity.json content. The
    terminal frames are ``width`` x ``height`` (None: the env's own render size)."""
    from rolltape.envs.build import make_env
    from rolltape.pass1.rollout import record_episode
    from rolltape.server.client import RemoteEnv, local_spec
    from rolltape.server.frames import FrameDrawer

    here = local_spec(spec)
    sessions_before = open_sessions(spec)
    local_env = make_env(here)
    # The env's own render size: MuJoCo's width and height (only MuJoCo frames are
    # compared), else gymnasium's MuJoCo default.
    width = int(width or getattr(local_env.unwrapped, "width", None) or 480)
    height = int(height or getattr(local_env.unwrapped, "height", None) or 480)
    served_env: RemoteEnv | None = None
    drawer = FrameDrawer(here) if frames else None
    rows: list[dict[str, Any]] = []
    first = None
    try:
        plan = _plan(policy_source, episodes, seed, tapes, local_env, vecnormalize, algo,
                     deterministic)
        served_env = RemoteEnv.connect(spec)
        for i, (ep_seed, options, policy) in enumerate(plan):
            mine = record_episode(local_env, policy, ep_seed, options)
            theirs = record_episode(served_env, policy, ep_seed, options)
            diff = compare_episode(mine, theirs)
            if diff is None and drawer is not None and mine["physics"] is not None:
                frame_l = drawer.draw(mine["physics"][-1], width, height, camera)
                frame_s = served_env.render_frame(width, height, camera)
                if not _same(frame_l, frame_s):
                    changed = int(np.count_nonzero(np.any(frame_l != frame_s, axis=-1))) \
                        if frame_l.shape == frame_s.shape else None
                    diff = {"step": len(mine["rewards"]), "field": "terminal_frame",
                            "local": f"{list(frame_l.shape)} uint8",
                            "served": f"{list(frame_s.shape)} uint8, {changed} pixel(s) differ"}
            row = {"episode": i, "seed": ep_seed, "tape": tapes[i] if tapes else None,
                   "length": len(mine["rewards"]),
                   "served_length": len(theirs["rewards"]),
                   "return": float(np.sum(mine["rewards"])),
                   "success_at_end": mine["success_at_end"],
                   "success_once": mine["success_once"], "agree": diff is None}
            if diff is not None:
                row["first_difference"] = diff
                if first is None:
                    first = {"episode": i, "seed": ep_seed, **diff}
            rows.append(row)
            if on_episode is not None:
                on_episode(row)
    finally:
        if served_env is not None:
            served_env.close()
        local_env.close()
        if drawer is not None:
            drawer.close()
    sessions_after = open_sessions(spec)
    if first is None and sessions_after != sessions_before:
        first = {"episode": None, "seed": None, "step": None, "field": "open_sessions",
                 "local": sessions_before, "served": sessions_after}
    return {"env": here, "server": spec["served"]["address"],
            "policy": "tapes" if tapes else policy_source, "episodes": len(rows), "seed": seed, "agree": first is None,
            "first_divergence": first, "frames": {"compared": frames, "width": width,
                                                  "height": height, "camera": camera},
            "open_sessions": {"before": sessions_before, "after": sessions_after},
            "rows": rows}


def _plan(source: str, episodes: int, seed: int, tapes: list[str] | None, env: Any,
          vecnormalize: str | None, algo: str | None, deterministic: bool
          ) -> list[tuple[int | None, Any, Any]]:
    """(seed, reset options, policy) per episode: the policy on seed + i, or each tape's
    actions on its own seed and options."""
    from rolltape.policies import load_policy

    if tapes:
        from rolltape.tape import Tape

        plan = []
        for path in tapes:
            tape = Tape.load(path)
            if tape.env_id != env.spec.id:
                raise UsageError(f"Tape '{path}' was recorded on {tape.env_id}, not on "
                                 f"{env.spec.id}; give tapes of the env you compare.")
            plan.append((tape.seed, tape.options, load_policy(f"tape:{path}", env)))
        return plan
    policy = load_policy(source, env, vecnormalize=vecnormalize, algo=algo,
                         deterministic=deterministic)
    return [(seed + i, None, policy) for i in range(episodes)]


def parity_worker(spec: dict[str, Any], options: dict[str, Any], conn: Any) -> None:
    """Spawned process: run the parity check, send ("result", dict) or an error line.
    Stopped (SIGTERM, after Ctrl-C in the command), it still closes its server session."""
    from rolltape.pass1.rollout import last_line

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        conn.send(("result", run_parity(
            spec, options.pop("policy"), options.pop("episodes"), options.pop("seed"),
            on_episode=lambda row: conn.send(("episode", row)), **options)))
    except UsageError as exc:
        conn.send(("usage_error", str(exc)))
    except OSError as exc:
        conn.send(("error", exc.strerror or last_line(exc)))
    except Exception as exc:
        conn.send(("error", last_line(exc)))
    finally:
        conn.close()
