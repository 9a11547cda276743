"""``rolltape serve-policy SOURCE``: a policy behind openpi's websocket protocol.

A client connects (with ``Authorization: Api-Key TOKEN`` when the server has a token, as
openpi's client sends it) and is sent the metadata: what the policy is, its action space
when known, its ``action_horizon`` (H actions per call) and ``execute_steps``, and under
``"rolltape"`` its ``max_sessions`` and whether its sessions are independent (a client may
then play several episodes at once, one per session: :class:`rolltape.policies.ServedPolicy`).
Then each
binary message is a request:

- ``{"observation": OBS}``: answered ``{"actions": array[H, *action_shape], "server_timing":
  {"infer_ms": ...}}`` (H is 1 for a policy that gives one action per call);
- ``{"observations": array[B, ...]}`` (a rolltape extension, offered when the metadata's
  ``"rolltape"`` says ``"batch": true``): answered ``{"actions": array[B, *action_shape]}``
  from one forward pass (``--batched-inference``, ``parity --batch-size``);
- ``{"__ctrl__": "reset", "seed": S}``: the session's policy is reset for an episode reset
  with seed S (its sampler reseeded, as a local policy is), answered ``{"__ack__": "reset"}``;
  another ``__ctrl__`` is answered ``{"__ack__": "ignored"}``.

A malformed request, a request for the wrong thing, or a policy that raises is answered with
one sentence as a text message, and that connection is closed (openpi's rule: text is an
error); the server serves on. Each connection is a session with a policy of its own
(``Policy.fork``, else a fresh load), up to ``--max-sessions`` at once; forward passes run
one at a time.

It imports numpy, msgpack, websockets and what the policy needs (SB3 and torch for ``sb3:``,
the user's module for a callable): never a simulator (the test reads ``sys.modules``).

Run as ``python -m rolltape.serve_policy SOURCE [flags]``: what ``rolltape serve-policy``
becomes (``os.execv``) once it has checked its flags, so that the server process holds none
of the CLI's imports; in another project's environment (LeRobot's, openpi's) it runs with
numpy, msgpack and websockets beside the policy's own framework, no CLI library needed.

May import: policy_server.wire, policies (lazily), zoo (lazily), address, errors,
flags, groups (the config's fields; neither imports typer),
server.protocol. Never: gymnasium's simulators, mujoco, pass 1, pass 2, executors.
"""

from __future__ import annotations

import contextlib
import hmac
import signal
import sys
import threading
import time
from dataclasses import MISSING, dataclass
from typing import Any, Callable

import numpy as np

from rolltape.address import bind_token, split_host_port
from rolltape.errors import UsageError
from rolltape.flags import POLICY, check_flags, flag
from rolltape.groups import Listener, PolicyFiles, Sampling
from rolltape.policy_server import wire
from rolltape.server.protocol import ProtocolError, describe_space

DEFAULT_BIND = "127.0.0.1:8000"
CLOSE_POLICY_VIOLATION, CLOSE_INTERNAL_ERROR, CLOSE_TRY_AGAIN = 1008, 1011, 1013
LEROBOT = "lerobot:"  # lerobot:PRETRAINED_DIR, served from LeRobot's environment


@dataclass(frozen=True)
class ServePolicyConfig(Listener, PolicyFiles, Sampling):
    """Everything ``rolltape serve-policy`` was asked for: the socket (:class:`Listener`),
    what loads beside the policy (:class:`PolicyFiles`; ``execute_steps`` is advertised in
    the metadata, a client may override it) and how it acts. Each field's rule is checked
    on construction; ``bind`` None is :data:`DEFAULT_BIND`."""

    source: str = flag(MISSING, "The policy: sb3:PATH.zip, zoo:FOLDER, MODULE:ATTR or "
                                "FILE.py:ATTR (a callable; one with action_horizon H returns "
                                "H actions a call).", panel=POLICY, argument=True)
    device: str = flag("cpu", "torch device of an SB3 policy (cpu, cuda).", panel=POLICY)

    def __post_init__(self) -> None:
        check_flags(self)
        if self.deterministic is None:  # a served policy acts deterministically unless told
            object.__setattr__(self, "deterministic", True)
        if self.bind is None:
            object.__setattr__(self, "bind", DEFAULT_BIND)

    def check(self) -> tuple[str, int, str | None]:
        """(host, port, token), refusing what cannot be served safely (the env server's
        rule: anything but loopback needs a token)."""
        bind = self.bind or DEFAULT_BIND
        host, port = split_host_port(bind, "--bind")
        if wire.is_policy_source(self.source):
            raise UsageError(f"serve-policy serves a policy rolltape loads (sb3:PATH.zip, "
                             f"zoo:FOLDER, MODULE:ATTR, FILE.py:ATTR), not '{self.source}'.")
        return host, port, bind_token(bind, host, self.token_file)


@dataclass
class Loaded:
    """A loaded source: a policy per session (``new``), the metadata sent on connect, and
    the action shape and chunk length each answer is checked against."""

    new: Callable[[], Any]
    metadata: dict[str, Any]
    horizon: int | None  # None: one action per call (sent as a chunk of one)


def load_source(cfg: ServePolicyConfig) -> Loaded:
    """Load ``cfg.source`` as eval's pass 1 would (no env: the checks that need one run on
    the client, against the metadata)."""
    from rolltape import __version__
    from rolltape.policies import load_policy

    source, vecnormalize, algo = cfg.source, cfg.vecnormalize, cfg.algo
    if source.startswith(LEROBOT):
        return _load_lerobot(cfg)
    if source.startswith("zoo:"):
        source, vecnormalize, algo = _zoo_checkpoint(source, vecnormalize, algo)
    if source in ("random",) or source.startswith("tape:"):
        raise UsageError(f"serve-policy serves a trained policy (sb3:PATH.zip, zoo:FOLDER, "
                         f"MODULE:ATTR or FILE.py:ATTR); '{source}' needs the env, so run it "
                         "with eval directly.")

    def new() -> Any:
        return load_policy(source, None, vecnormalize=vecnormalize, algo=algo,
                           deterministic=bool(cfg.deterministic), device=cfg.device)

    first = new()
    owner = getattr(first, "owner", None)
    model = getattr(first, "model", None)  # SB3
    action_space = getattr(model or owner, "action_space", None)
    observation_space = getattr(model or owner, "observation_space", None)
    horizon = getattr(owner, "action_horizon", None)
    if horizon is not None and (type(horizon) is not int or horizon < 1):
        raise UsageError(f"'{source}' has action_horizon {horizon!r}; it must be a whole "
                         "number of actions (at least 1).")
    execute = cfg.execute_steps or getattr(owner, "execute_steps", None)
    if execute is not None and horizon is not None and execute > horizon:
        raise UsageError(f"--execute-steps {execute} is more than the policy's chunk of "
                         f"{horizon} actions.")
    description = {k: v for k, v in first.description.items()
                   if isinstance(v, (str, int, float, bool, type(None)))}
    # Sessions whose answers do not depend on each other's requests (Policy.fork: a
    # deterministic SB3 policy), so that a client may play several episodes at once on them;
    # not a sampling policy, whose sessions all draw from torch's one global generator.
    independent = first.fork() is not None
    # One forward pass over a batch of observations (--batched-inference, parity --batch-size):
    # an SB3 policy acting deterministically, as a local batched pass 1 requires.
    batches = callable(getattr(first, "predict_action", None)) and cfg.deterministic
    metadata = {
        wire.ROLLTAPE_KEY: {"version": __version__, "reset": True,
                            "max_sessions": cfg.max_sessions,
                            "independent_sessions": independent, "batch": batches},
        "policy": description,
        "action_space": describe_space(action_space) if action_space is not None else None,
        "observation_space": (describe_space(observation_space)
                              if observation_space is not None else None),
        "action_horizon": horizon or 1,
        "execute_steps": execute,
    }
    kept = [first]

    def session_policy() -> Any:
        # The loaded one first; then a fork (SB3 deterministic: the same, stateless), else
        # a fresh load, so that no session sees another's state.
        if kept:
            return kept.pop()
        forked = first.fork()
        return forked if forked is not None else new()

    return Loaded(session_policy, metadata, horizon)


def _load_lerobot(cfg: ServePolicyConfig) -> Loaded:
    """A LeRobot pretrained folder, run per step as lerobot-eval runs it (its own action
    queue: one action a call). lerobot and torch are imported here only, so other sources'
    servers stay light."""
    from rolltape import __version__
    from rolltape.policy_server.lerobot_policy import load_lerobot

    with contextlib.redirect_stdout(sys.stderr):  # LeRobot's loading chatter: stdout's
        first = load_lerobot(cfg.source, device=cfg.device)  # first line is the address
    kept = [first]

    def session_policy() -> Any:
        return kept.pop() if kept else first.fork()  # each session its own action queue

    metadata = {
        # a session's reset reseeds torch's global generator, which a sampling policy
        # (Diffusion) draws from: sessions interleaved would change each other's episodes
        wire.ROLLTAPE_KEY: {"version": __version__, "reset": True,
                            "max_sessions": cfg.max_sessions, "independent_sessions": False},
        "policy": first.description,
        "action_space": None,  # LeRobot gives a shape, not bounds: the client checks the env's
        "observation_space": None,
        "action_horizon": 1,
        "execute_steps": None,
    }
    return Loaded(session_policy, metadata, None)


def _zoo_checkpoint(source: str, vecnormalize: str | None, algo: str | None
                    ) -> tuple[str, str | None, str | None]:
    """(sb3:CHECKPOINT, VecNormalize statistics, algo) of an rl-zoo3 folder; its env
    wrappers, which run on the env's side, are refused: serve the plain checkpoint and give
    eval the wrappers."""
    from rolltape.zoo import read_zoo

    zoo = read_zoo(source[len("zoo:"):])
    if zoo.wrappers or zoo.frame_stack > 1:
        raise UsageError(f"'{source}' wraps its env (wrappers or a frame stack), which runs "
                         "beside the env, not the policy; serve its checkpoint (sb3:PATH.zip) "
                         f"and evaluate with `--policy ws://HOST:PORT` and eval's "
                         "--wrapper/--frame-stack.")
    stats = vecnormalize or (str(zoo.vecnormalize) if zoo.vecnormalize else None)
    return f"sb3:{zoo.model}", stats, algo or zoo.algo or None


class _Refused(Exception):
    """A request answered with one sentence (a text message), then the connection closed."""

    def __init__(self, sentence: str, code: int) -> None:
        super().__init__(sentence)
        self.code = code


class PolicyServer:
    """The websocket server around a loaded source (``serve_forever`` until stopped)."""

    def __init__(self, cfg: ServePolicyConfig, loaded: Loaded,
                 log: Callable[[str], None] = print) -> None:
        from websockets.sync.server import serve

        self.cfg = cfg
        self.loaded = loaded
        self.log = log
        host, port, self.token = cfg.check()
        self._slots = threading.BoundedSemaphore(cfg.max_sessions)
        self._forward = threading.Lock()  # one forward pass at a time (torch, a user's code)
        self.sessions = 0
        self._count = threading.Lock()
        try:
            self.server = serve(self._handle, host, port, max_size=cfg.max_payload,
                                compression=None, process_request=self._admit,
                                close_timeout=2)
        except OSError as exc:
            raise UsageError(f"--bind {cfg.bind} cannot be used ({exc.strerror or exc}); pick "
                             "another port (0: any free one).") from None
        bound = self.server.socket.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.address = f"{wire.SCHEME}{shown}:{bound[1]}"

    def _admit(self, connection: Any, request: Any) -> Any:
        """The handshake: a health check and the session count (plain GETs), and the token
        (openpi's Api-Key header)."""
        from http import HTTPStatus

        if request.path == "/healthz":  # openpi's
            return connection.respond(HTTPStatus.OK, "OK\n")
        if request.path == "/stats":  # sessions open now (tests, and whoever watches it)
            return connection.respond(HTTPStatus.OK, f'{{"sessions": {self.sessions}}}\n')
        if self.token is not None:
            sent = request.headers.get("Authorization") or ""
            if not hmac.compare_digest(sent.encode(), f"Api-Key {self.token}".encode()):
                return connection.respond(HTTPStatus.UNAUTHORIZED,
                                          "the policy server needs its token: set "
                                          "ROLLTAPE_TOKEN_FILE to the file that holds it\n")
        return None

    def _handle(self, ws: Any) -> None:
        """One session: the metadata, then requests until the client goes."""
        from websockets.exceptions import ConnectionClosed

        if not self._slots.acquire(blocking=False):
            _refuse(ws, f"the policy server serves {self.cfg.max_sessions} session(s) at once "
                        "(--max-sessions) and all are taken; use fewer --workers or raise "
                        "--max-sessions", CLOSE_TRY_AGAIN)
            return
        with self._count:
            self.sessions += 1
        try:
            with self._forward:
                policy = self.loaded.new()
            ws.send(wire.encode(self.loaded.metadata))
            for message in ws:
                ws.send(wire.encode(self._answer(policy, message)))
        except _Refused as exc:
            _refuse(ws, str(exc), exc.code)
        except ConnectionClosed:
            pass
        finally:
            with self._count:
                self.sessions -= 1
            self._slots.release()

    def _answer(self, policy: Any, message: Any) -> dict[str, Any]:
        try:
            request = wire.decode(message, self.cfg.max_payload)
            if not isinstance(request, dict):
                raise ProtocolError("a request must be a msgpack map")
        except ProtocolError as exc:
            raise _Refused(f"malformed request: {exc}", CLOSE_POLICY_VIOLATION) from None
        control = request.get(wire.CONTROL)
        if control is not None:
            if control != wire.RESET:
                return {wire.ACK: "ignored"}
            seed = request.get("seed")
            if seed is not None and (type(seed) is not int or seed < 0):
                raise _Refused(f"malformed request: a reset's seed must be a whole number "
                               f"0 or more, or nil, got {seed!r}", CLOSE_POLICY_VIOLATION)
            with self._forward:
                self._call(policy.reset, seed)
            return {wire.ACK: wire.RESET}
        if "observations" in request:
            return self._answer_batch(policy, request["observations"])
        if "observation" not in request:
            keys = ", ".join(sorted(map(str, request)))[:120]
            raise _Refused(f"malformed request: an infer request is a map with 'observation' "
                           f"(rolltape's policies take the env's observation), got keys "
                           f"[{keys}]", CLOSE_POLICY_VIOLATION)
        start = time.perf_counter()
        with self._forward:
            action = self._call(policy.act, request["observation"])
        actions = self._chunk(action)
        return {"actions": actions,
                "server_timing": {"infer_ms": (time.perf_counter() - start) * 1e3}}

    def _answer_batch(self, policy: Any, observations: Any) -> dict[str, Any]:
        """``{"observations": [B, ...]}``: B actions from one forward pass, as a local
        ``--batched-inference`` pass 1 gets them (a rolltape extension of openpi's wire)."""
        if not self.loaded.metadata[wire.ROLLTAPE_KEY].get("batch"):
            raise _Refused("this policy does not act on a batch of observations (only a "
                           "deterministic SB3 policy does); send one 'observation' a request",
                           CLOSE_POLICY_VIOLATION)
        arrays = list(observations.values()) if isinstance(observations, dict) else [observations]
        rows = {len(v) if isinstance(v, np.ndarray) and v.ndim >= 1 else 0 for v in arrays}
        if len(rows) != 1 or 0 in rows:
            raise _Refused("malformed request: 'observations' must be an array (or a map of "
                           "arrays) of at least one row, every array with the same number of "
                           "rows", CLOSE_POLICY_VIOLATION)
        start = time.perf_counter()
        with self._forward:
            actions = np.asarray(self._call(policy.predict_action, observations))
        (count,) = rows
        if actions.dtype.kind not in "biuf" or actions.ndim < 1 or len(actions) != count:
            raise _Refused(f"the policy gave actions of shape {list(actions.shape)} and dtype "
                           f"{actions.dtype} for {count} observations", CLOSE_INTERNAL_ERROR)
        return {"actions": actions,
                "server_timing": {"infer_ms": (time.perf_counter() - start) * 1e3}}

    def _call(self, method: Callable[[Any], Any], arg: Any) -> Any:
        try:
            return method(arg)
        except UsageError as exc:  # the request does not fit the policy (a LeRobot input)
            raise _Refused(str(exc).rstrip("."), CLOSE_POLICY_VIOLATION) from None
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            raise _Refused(f"the policy raised {type(exc).__name__}: "
                           f"{lines[-1] if lines else ''}".rstrip(": "),
                           CLOSE_INTERNAL_ERROR) from None

    def _chunk(self, action: Any) -> np.ndarray:
        """The answer's actions: [H, ...] for a chunked policy, [1, ...] for another."""
        actions = np.asarray(action)
        if actions.dtype.kind not in "biuf":
            raise _Refused(f"the policy gave an action of dtype {actions.dtype}; actions must "
                           "be numbers", CLOSE_INTERNAL_ERROR)
        horizon = self.loaded.horizon
        if horizon is None:
            return actions[None]
        if actions.ndim < 1 or actions.shape[0] != horizon:
            raise _Refused(f"the policy declares action_horizon {horizon} but gave actions "
                           f"of shape {list(actions.shape)}", CLOSE_INTERNAL_ERROR)
        return actions

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def shutdown(self) -> None:
        self.server.shutdown()


def _refuse(ws: Any, sentence: str, code: int) -> None:
    """One sentence as a text message (openpi's client raises it), then close."""
    try:
        ws.send(sentence + ".")
        ws.close(code, sentence[:120])
    except Exception:  # the client went first
        pass


def serve_policy(cfg: ServePolicyConfig) -> str | None:
    """``rolltape serve-policy``: load, print where it listens, answer until stopped.
    Returns the name of the signal that stopped it (SIGTERM or SIGINT)."""
    cfg.check()  # before a policy loads: a bad --bind is said at once
    loaded = load_source(cfg)
    server = PolicyServer(cfg, loaded, log=lambda line: print(line, flush=True))
    stopped: list[str] = []
    stopping: list[threading.Thread] = []

    def stop(signum: int, frame: Any) -> None:
        # serve_forever blocks this thread: another one closes the socket and the sessions
        stopped.append(signal.Signals(signum).name)
        stopping.append(threading.Thread(target=server.shutdown, daemon=True))
        stopping[-1].start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    horizon = loaded.metadata["action_horizon"]
    print(f"serving policy {cfg.source} on {server.address} (openpi websocket protocol; "
          f"{horizon} action(s) per call); clients use --policy {server.address}", flush=True)
    try:
        server.serve_forever()
    finally:
        for thread in stopping:  # its shutdown must finish before this interpreter does
            thread.join(10)
        server.shutdown()  # idempotent: every session closed, every handler returned
        sys.stdout.flush()
    return stopped[0] if stopped else None


def to_argv(cfg: ServePolicyConfig) -> list[str]:
    """The arguments of ``python -m rolltape.serve_policy`` that :func:`parse_args` reads
    back as ``cfg``.

    >>> to_argv(ServePolicyConfig("sb3:ppo.zip", execute_steps=2))[:4]
    ['sb3:ppo.zip', '--bind', '127.0.0.1:8000', '--max-sessions']
    >>> parse_args(to_argv(ServePolicyConfig("m:f", deterministic=False))).deterministic
    False
    >>> parse_args(["m:f"]) == ServePolicyConfig("m:f")  # the record's defaults, not copies
    True
    """
    argv = [cfg.source, "--bind", cfg.bind or DEFAULT_BIND, "--max-sessions",
            str(cfg.max_sessions), "--max-payload", str(cfg.max_payload), "--device", cfg.device]
    for name, value in (("--token-file", cfg.token_file), ("--vecnormalize", cfg.vecnormalize),
                        ("--algo", cfg.algo), ("--execute-steps", cfg.execute_steps)):
        if value is not None:
            argv += [name, str(value)]
    return argv + ([] if cfg.deterministic else ["--stochastic"])


def parse_args(argv: list[str] | None = None) -> ServePolicyConfig:
    """``python -m rolltape.serve_policy``'s flags (``rolltape serve-policy``'s, read
    without the CLI's libraries: this is how a LeRobot or openpi environment runs it)."""
    import argparse

    # No defaults here: a flag left out is left to the record's own (declared once there).
    parser = argparse.ArgumentParser(
        prog="python -m rolltape.serve_policy", argument_default=argparse.SUPPRESS,
        description="Serve a policy over openpi's websocket protocol (rolltape serve-policy).")
    parser.add_argument("source", help="sb3:PATH.zip, zoo:FOLDER, lerobot:DIR, MODULE:ATTR or "
                                       "FILE.py:ATTR")
    for name in ("--bind", "--token-file", "--vecnormalize", "--algo", "--device"):
        parser.add_argument(name)
    for name in ("--execute-steps", "--max-sessions", "--max-payload"):
        parser.add_argument(name, type=int)
    parser.add_argument("--stochastic", dest="deterministic", action="store_false")
    return ServePolicyConfig(**vars(parser.parse_args(argv)))


def exec_server(cfg: ServePolicyConfig) -> None:
    """``rolltape serve-policy``: check ``cfg``, then become ``python -m
    rolltape.serve_policy`` (``os.execv``): a fresh interpreter in this process, holding
    the server's imports only, not the CLI's."""
    import os

    try:
        import msgpack  # noqa: F401
        import websockets  # noqa: F401
    except ImportError:
        raise UsageError("serve-policy needs msgpack and websockets, which a plain install "
                         "lacks; install them with `pip install 'rolltape[server]'`.") \
            from None
    cfg.check()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "rolltape.serve_policy", *to_argv(cfg)])


def main(argv: list[str] | None = None) -> int:
    """``python -m rolltape.serve_policy SOURCE [flags]``: what ``rolltape serve-policy``
    runs after it has checked its flags, so that the server process imports no more than
    it needs; also the entry point where rolltape's CLI libraries are not installed."""
    try:
        stopped = serve_policy(parse_args(argv))
    except UsageError as exc:
        print(f"rolltape: {exc}", file=sys.stderr, flush=True)  # as the CLI says it
        return 2
    if stopped is not None:
        print(f"Interrupted ({stopped}): stopped serving the policy; every session was closed.",
              file=sys.stderr, flush=True)
        return 130 if stopped == "SIGINT" else 143
    return 0


if __name__ == "__main__":
    sys.exit(main())
