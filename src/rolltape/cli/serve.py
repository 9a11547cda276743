"""The ``serve``, ``serve-policy`` and ``parity`` verbs.

May import: typer, errors, and (lazily, inside each verb) server.*, envs, files,
executors.launch. Never at module level: zmq, msgpack, mujoco, torch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from rolltape.cli.options import config_values, options_of, takes
from rolltape.cli.show import say
from rolltape.config import EvalConfig
from rolltape.errors import DivergenceError, UsageError
from rolltape.flags import POLICY, parse_kwargs
from rolltape.server.server import ServeConfig

PARITY_TIMEOUT = 600.0  # seconds the parity worker may go without finishing an episode


@takes(options_of(ServeConfig))
def serve(
    env: Optional[str] = typer.Argument(None, help="Gymnasium env id to serve "
                                        "(HalfCheetah-v5); leave it out with --suite."),
    **config: Any,
) -> None:
    """Serve an env (or a suite's) over zmq for `rolltape eval tcp://HOST:PORT/ENV`,
    `eval --suite S --served tcp://HOST:PORT` and `parity`."""
    try:
        import msgpack  # noqa: F401
        import zmq  # noqa: F401
    except ImportError:
        from rolltape.server.protocol import missing_extra

        raise missing_extra() from None
    from rolltape.server.server import serve as run_server

    values = config_values(ServeConfig, config)
    max_episode_steps = values.get("max_episode_steps")
    if max_episode_steps is not None and max_episode_steps < 1:
        raise UsageError(f"--max-episode-steps must be at least 1, got {max_episode_steps}.")
    if values.get("backend") is not None:
        from rolltape.pass2.backends import parse_backends

        (values["backend"],) = parse_backends([values["backend"]])
    stopped_by = run_server(ServeConfig(env=env, **values))
    if stopped_by is not None:  # SIGTERM or Ctrl-C: the status says so, as for any verb
        from rolltape.errors import Interrupted

        stop = Interrupted(stopped_by)
        raise Interrupted(stopped_by, f"{Interrupted.heading(stop)}: stopped serving; "
                                      "every session's env was closed.")

def serve_policy(
    source: str = typer.Argument(..., help="The policy: sb3:PATH.zip, zoo:FOLDER, "
                                 "MODULE:ATTR or FILE.py:ATTR (a callable; one with "
                                 "action_horizon H returns H actions a call)."),
    bind: str = typer.Option("127.0.0.1:8000", help="HOST:PORT (port 0: any free port); "
                             "anything but loopback needs --token-file."),
    token_file: Optional[Path] = typer.Option(None, help="File holding the token clients "
                                              "must send (they set ROLLTAPE_TOKEN_FILE)."),
    vecnormalize: Optional[Path] = typer.Option(None, help="VecNormalize statistics "
                                                "(.pkl), applied beside the policy."),
    algo: Optional[str] = typer.Option(None, help="SB3 algorithm (detected when omitted)."),
    deterministic: bool = typer.Option(True, "--deterministic/--stochastic",
                                       help="Deterministic or sampled actions."),
    device: str = typer.Option("cpu", help="torch device of an SB3 policy (cpu, cuda)."),
    execute_steps: Optional[int] = typer.Option(
        None, help="Actions of each chunk a client executes open loop (its "
                   "--execute-steps wins); default: the whole chunk."),
    max_sessions: int = typer.Option(8, help="Sessions (connections) served at once."),
    max_payload: int = typer.Option(64 * 2**20, help="Largest message accepted, in bytes."),
) -> None:
    """Serve a policy over openpi's websocket protocol for `eval --policy ws://HOST:PORT`
    (and openpi's own client); the server imports no simulator."""
    import os

    try:
        import msgpack  # noqa: F401
        import websockets  # noqa: F401
    except ImportError:
        raise UsageError("serve-policy needs msgpack and websockets, which a plain install "
                         "lacks; install them with `pip install 'rolltape[server]'`.") \
            from None
    from rolltape.serve_policy import ServePolicyConfig, to_argv

    cfg = ServePolicyConfig(
        source=source, bind=bind, token_file=str(token_file) if token_file else None,
        vecnormalize=str(vecnormalize) if vecnormalize else None, algo=algo,
        deterministic=deterministic, device=device, execute_steps=execute_steps,
        max_sessions=max_sessions, max_payload=max_payload)
    cfg.check()
    sys.stdout.flush()
    sys.stderr.flush()
    # A fresh interpreter with only the server's imports (not this CLI's), in this process.
    os.execv(sys.executable, [sys.executable, "-m", "rolltape.serve_policy",
                              *to_argv(cfg)])

@takes(options_of(EvalConfig, only=("episodes", "seed", "vecnormalize", "algo",
                                     "env_kwargs", "max_episode_steps"),
                  defaults={"episodes": 5}))  # parity compares a few whole episodes
def parity(
    env: Optional[str] = typer.Argument(None, help="The local env id (HalfCheetah-v5); "
                                        "leave it out with --suite and --task."),
    served: Optional[str] = typer.Option(None, "--served",
                                         help="The env server: tcp://HOST:PORT."),
    local_policy: Optional[str] = typer.Option(
        None, "--local-policy", rich_help_panel=POLICY,
        help="With --policy ws://HOST:PORT: the same policy loaded here (sb3:PATH.zip, "
             "MODULE:ATTR, ...); compares their actions on the same observations."),
    suite: Optional[str] = typer.Option(None, help="With --task: compare one task of the "
                                        "suite a `serve --suite` server serves."),
    task: Optional[str] = typer.Option(None, help="With --suite: the task (name or "
                                       "suite/task)."),
    policy: str = typer.Option("random", "--policy", "-p", rich_help_panel=POLICY,
                               help="random | sb3:PATH.zip | MODULE:ATTR | FILE.py:ATTR | "
                                    "tape:PATH.npz (replays its actions)"),
    width: int = typer.Option(480, help="Width of the compared terminal frame."),
    height: int = typer.Option(480, help="Height of the compared terminal frame."),
    camera: Optional[str] = typer.Option(None, help="Model camera of the terminal frame "
                                         "(default: the env's own view)."),
    frames: bool = typer.Option(True, help="Compare the rendered terminal frames."),
    tapes: Optional[List[Path]] = typer.Option(
        None, "--tape", help="Replay this tape's actions from its seed (repeatable), "
                             "instead of --policy on --episodes seeds."),
    output: Path = typer.Option(Path("parity.json"), "--out", "-o",
                                help="Where to write parity.json."),
    batch: int = typer.Option(1, "--batch", rich_help_panel=POLICY,
                              help="With --policy ws://: ask the served policy for each "
                                   "action within a batch of this many observations "
                                   "(one forward pass), to see whether batching changes "
                                   "its actions."),
    **config: Any,
) -> None:
    """Play the same seeded episodes locally and served (an env with --served, a policy
    with --policy ws://... --local-policy); exit 1 at any difference."""
    from rolltape.address import parse_server
    from rolltape.envs.ids import env_spec
    from rolltape.files import write_json
    from rolltape.server.client import describe, served_difference
    from rolltape.server.frames import check_size
    from rolltape.server.protocol import difference_sentence

    episodes, seed, algo = config["episodes"], config["seed"], config["algo"]
    vecnormalize, max_episode_steps = config["vecnormalize"], config["max_episode_steps"]
    env_kwargs = parse_kwargs(config["env_kwargs"])
    for tape in tapes or []:
        if not tape.is_file():
            raise UsageError(f"--tape '{tape}' does not exist; give a tape file (.npz).")
    if tapes and policy != "random":
        raise UsageError("--tape replays tapes' actions; drop --policy, or drop --tape.")
    if tapes:
        episodes = len(tapes)
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}.")
    if seed < 0:
        raise UsageError(f"--seed must be 0 or more, got {seed}.")
    try:
        check_size(width, height, camera)
    except UsageError as exc:
        raise UsageError(f"--width/--height/--camera: {exc}.") from None
    if output.is_dir():
        raise UsageError(f"--out '{output}' is a folder; give the path of parity.json.")
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, got {batch}.")
    if local_policy is not None or policy.startswith("ws://"):
        _policy_parity(env, served, policy, local_policy, episodes, seed, vecnormalize,
                       algo, env_kwargs, max_episode_steps, output, say, batch)
        return
    if batch != 1:
        raise UsageError("--batch compares a served policy's batched actions: give "
                         "--policy ws://HOST:PORT and --local-policy SOURCE with it.")
    if served is None:
        raise UsageError("Give the env server as --served tcp://HOST:PORT, or a policy "
                         "server as --policy ws://HOST:PORT with --local-policy SOURCE.")
    address = parse_server(served)
    if suite is not None or task is not None:
        spec = _suite_task_spec(suite, task, env, env_kwargs, max_episode_steps, address)
    elif env is None:
        raise UsageError("Give the local env id (rolltape parity HalfCheetah-v5 --served "
                         "tcp://HOST:PORT), or --suite and --task for a suite server.")
    elif env.startswith("tcp://"):
        raise UsageError("Give the local env id as ENV and the server as --served "
                         "tcp://HOST:PORT.")
    else:
        spec = env_spec(f"{address}/{env}", env_kwargs, max_episode_steps)
    described = describe(spec)
    diff = served_difference(spec, described["descriptor"])
    if diff is not None:  # a divergence before any step: named like the others
        write_json(output, {"env": spec, "server": address, "agree": False,
                            "first_divergence": {"episode": None, "seed": None,
                                                 "step": None, **diff}, "rows": []})
        raise DivergenceError(f"parity: {difference_sentence(diff)}; see {output}.")
    backend = described.get("backend") if described.get("physics") else None
    options = {"policy": policy, "episodes": episodes, "seed": seed,
               "vecnormalize": str(vecnormalize) if vecnormalize else None, "algo": algo,
               "width": width, "height": height, "camera": camera,
               "frames": frames and backend is not None,
               "tapes": [str(t) for t in tapes] if tapes else None}
    result = _run_worker(spec, options, backend, say)
    result["frames"]["backend"] = backend
    if spec["served"].get("name") is not None:  # a suite server's task
        result["task"] = spec["served"]["name"]
    write_json(output, result)
    if result["agree"]:
        compared = ", physics" if described.get("physics") else ""
        compared += ", terminal frames" if options["frames"] else ""
        say(f"parity: {episodes} episode(s) agree bit for bit (observations, actions, "
            f"rewards, flags{compared}); wrote {output}")
        return
    d = result["first_divergence"]
    where = (f"episode {d['episode']} (seed {d['seed']}) step {d['step']}"
             if d["episode"] is not None else "after the episodes")
    raise DivergenceError(f"parity: the served env diverged at {where} in {d['field']}: "
                          f"local {d['local']}, served {d['served']}; see {output}.")


VERBS = {"serve": serve, "serve-policy": serve_policy, "parity": parity}


def _policy_parity(env: str | None, served: str | None, policy: str,
                   local_policy: str | None, episodes: int, seed: int, vecnormalize: Any,
                   algo: str | None, env_kwargs: dict[str, Any],
                   max_episode_steps: int | None, output: Path,
                   say: Callable[[str], None], batch: int = 1) -> None:
    """``parity --policy ws://... --local-policy SOURCE ENV``: a served policy against the
    same policy loaded here (:mod:`rolltape.policy_parity`), in a spawned worker."""
    from rolltape.envs.ids import env_spec
    from rolltape.files import write_json
    from rolltape.policy_parity import policy_parity_worker
    from rolltape.policy_server.client import check_policy_server
    from rolltape.policy_server.wire import is_policy_source

    if not is_policy_source(policy) or local_policy is None:
        raise UsageError("Policy parity compares a served policy with a local one: give "
                         "--policy ws://HOST:PORT and --local-policy SOURCE together.")
    if served is not None or env is None or env.startswith("tcp://"):
        raise UsageError("Policy parity plays a local env: give its id as ENV (e.g. "
                         "HalfCheetah-v5), without --served.")
    spec = env_spec(env, env_kwargs, max_episode_steps)
    check_policy_server(policy)  # there, before the worker loads anything
    options = {"policy": policy, "local_policy": local_policy, "episodes": episodes,
               "seed": seed, "vecnormalize": str(vecnormalize) if vecnormalize else None,
               "algo": algo, "batch": batch}

    def shown(row: dict[str, Any]) -> None:
        mark = ("agree" if row["first_difference"] is None else
                f"differ from step {row['first_difference']['step']}")
        outcome = "; the outcome differs" if row["outcome_differs"] else ""
        say(f"episode {row['episode']} (seed {row['seed']}, {row['length']} steps): "
            f"{mark}{outcome}")

    result = _run_worker(spec, options, None, say, policy_parity_worker, shown)
    write_json(output, result)
    if result["agree"]:
        within = f" (asked within batches of {batch})" if batch > 1 else ""
        say(f"parity: {episodes} episode(s), {result['steps']} steps: the served policy's "
            f"actions{within} equal the local policy's bit for bit, 0 differing steps; "
            f"wrote {output}")
        return
    first = result["first_difference"]
    where = (f"first at episode {first['episode']} (seed {first['seed']}) step "
             f"{first['step']}, dimension {first['dimension']}" if first else
             "in no action")
    outcomes = (f"; the outcome of episode(s) {result['outcomes_differ']} differs"
                if result["outcomes_differ"] else "; no episode's outcome differs")
    within = f" (asked within batches of {batch})" if batch > 1 else ""
    raise DivergenceError(f"parity: the served policy's actions{within} differ at "
                          f"{result['differing_steps']} of {result['steps']} steps, {where}, "
                          f"largest difference {result['max_abs_diff']:.3g}{outcomes}; see "
                          f"{output}.")


def _suite_task_spec(suite: str | None, task: str | None, env: str | None,
                     env_kwargs: Any, max_episode_steps: int | None,
                     address: str) -> dict[str, Any]:
    """The served spec of one suite task, resolved as ``serve --suite`` resolves it."""
    from rolltape.address import served_task_spec

    if suite is None or task is None:
        raise UsageError("--suite and --task go together: parity compares one task of a "
                         "suite (e.g. --suite mazes --task umaze).")
    if env is not None or env_kwargs:
        raise UsageError(f"Give either ENV or --suite with --task ('{task}'), not both: the "
                         "suite names the task's env and its kwargs.")
    specs = ServeConfig(env=None, suite=suite, tasks=task,
                        max_episode_steps=max_episode_steps).served_specs("--task")
    if len(specs) != 1:
        raise UsageError(f"--task names one task; '{task}' picks {len(specs)} "
                         f"({', '.join(specs)}).")
    [(name, local)] = specs.items()
    return served_task_spec(local, address, name)


def _run_worker(spec: dict[str, Any], options: dict[str, Any], backend: str | None,
                say: Callable[[str], None], entry: Any = None,
                shown: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the comparison in a spawned worker (it loads the policy and draws with GL);
    ``entry``: the worker's function (the env parity's by default), ``shown``: how an
    episode's row is said."""
    from rolltape.errors import RunFailed
    from rolltape.executors.launch import spawn_worker, stop_worker
    from rolltape.parity import parity_worker

    env: dict[str, str | None] = {"MUJOCO_GL": None, "PYOPENGL_PLATFORM": None}
    if backend:
        from rolltape.pass2.backends import gl_environment

        env.update(gl_environment(backend))
    worker = spawn_worker(entry or parity_worker, spec, options, env=env)
    try:
        while True:
            if not worker.conn.poll(PARITY_TIMEOUT):
                raise RunFailed(f"The parity worker finished no episode in {PARITY_TIMEOUT:g} s; "
                                "is the env or the server hung?")
            try:
                kind, payload = worker.conn.recv()
            except EOFError:
                raise RunFailed("The parity worker died; rerun to see whether it happens "
                                "again.") from None
            if kind == "episode" and shown is not None:
                shown(payload)
            elif kind == "episode":
                mark = "agree" if payload["agree"] else f"differ ({payload['first_difference']['field']})"
                say(f"episode {payload['episode']} (seed {payload['seed']}, "
                    f"{payload['length']} steps): {mark}")
            elif kind == "result":
                return payload
            elif kind == "usage_error":
                raise UsageError(payload)
            else:
                raise RunFailed(f"The parity check stopped: {payload}")
    finally:
        stop_worker(worker)
        sys.stdout.flush()
