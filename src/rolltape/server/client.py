"""The client side of ``rolltape serve``: :class:`RemoteEnv`, an env that steps on a server.

A pass-1 worker builds a ``RemoteEnv`` where it would build a local env (its spec names a
server). It has the local env's spaces, spec and metadata, and its descriptor is what the
server must match (else INCOMPATIBLE, before any step). ``reset``/``step`` travel over the
wire; each reply carries the MuJoCo physics state, so the tape records it as a local run
does. A request is sent once: no reply within the timeout means the server is gone
(:class:`ServerGone`, an OSError, so a run stops keeping what finished), never a resend.
A suite task's served spec names its task (``served["name"]``, ``suite/task``): the env of
that name on a ``serve --suite`` server.
:class:`RemoteVectorEnv` holds vector sessions of a ``serve --num-envs N`` server: one
request and one reply per step for all their sub-envs (batched pass 1 steps them).

May import: envs, server.protocol, server.address, errors. Never: policies, pass 2,
executors.

Example (not run: it needs a server):
    >>> env = RemoteEnv.connect(env_spec("tcp://127.0.0.1:7450/HalfCheetah-v5"))
    >>> obs, info = env.reset(seed=0)
"""

from __future__ import annotations

import errno
import math
import time
from typing import Any

import gymnasium as gym
import numpy as np

from rolltape.address import DEFAULT_TIMEOUT, TOKEN_FILE_VARIABLE, read_token
from rolltape.envs.build import make_env
from rolltape.envs.state import split_physics
from rolltape.errors import SessionReclaimed, UsageError
from rolltape.server import protocol as P


class ServerGone(ConnectionError):
    """The server did not answer in time, or no longer knows the session (it restarted)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(errno.ETIMEDOUT if timed_out else errno.ECONNABORTED, message)
        self.timed_out = timed_out


def local_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec a tape of a served env stores: the local env's, so it replays locally."""
    return {k: v for k, v in spec.items() if k != "served"}


class Connection:
    """One DEALER socket to a server; :meth:`call` sends a request once and waits for the
    reply with its request id."""

    def __init__(self, address: str, token: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        try:
            import zmq
        except ImportError:
            raise P.missing_extra() from None
        self.address, self.token, self.timeout = address, token, timeout
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self._again = zmq.Again
        self.rid = 0
        self._rcvtimeo = -1  # the socket's receive timeout in ms, as last set

    def call(self, op: str, *, sid: str | None = None, gen: int = 0,
             timeout: float | None = None, **args: Any) -> dict[str, Any]:
        """Send one request and return its reply (any status); ServerGone if none comes."""
        return self.receive(self.send(op, sid=sid, gen=gen, **args), op, timeout)

    def send(self, op: str, *, sid: str | None = None, gen: int = 0, **args: Any) -> int:
        """Send one request without waiting (see :meth:`receive`); return its request id."""
        self.rid += 1
        self.socket.send(P.encode(P.request(op, sid=sid, gen=gen, rid=self.rid,
                                            token=self.token, **args)))
        return self.rid

    def receive(self, rid: int, op: str, timeout: float | None = None) -> dict[str, Any]:
        """The reply to request ``rid`` (any status); ServerGone if none comes in time."""
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:  # bounded by the deadline; replies to timed-out requests are skipped
            left = deadline - time.monotonic()
            data = self._receive(left) if left > 0 else None
            if data is None:
                raise ServerGone(f"The env server at {self.address} did not answer {op} within "
                                 f"{wait:g} s (is `rolltape serve` running there? "
                                 "ROLLTAPE_SERVER_TIMEOUT waits longer)", timed_out=True)
            try:
                reply = P.decode(data)
            except P.ProtocolError as exc:
                raise ServerGone(f"The env server at {self.address} sent a reply that is not "
                                 f"msgpack ({exc}); is that address a rolltape server?") from None
            if reply.get("rid") == rid or reply.get("rid") is None:
                return reply

    def _receive(self, seconds: float) -> bytes | None:
        """The next message, or None after ``seconds`` (rounded up to a tenth). A blocking
        receive with a timeout: one call per reply, and Ctrl-C still interrupts it."""
        ms = 100 * math.ceil(seconds * 10)  # in tenths of a second: rarely a new value
        if ms != self._rcvtimeo:
            self.socket.rcvtimeo = ms
            self._rcvtimeo = ms
        try:
            return self.socket.recv()
        except self._again:
            return None

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()


def connect(spec: dict[str, Any]) -> Connection:
    """A connection to the server a served spec names (token from its token file)."""
    served = spec["served"]
    token_file = served.get("token_file")
    token = read_token(token_file, TOKEN_FILE_VARIABLE) if token_file else None
    return Connection(served["address"], token, float(served.get("timeout") or DEFAULT_TIMEOUT))


def expect_ok(reply: dict[str, Any], address: str, what: str) -> dict[str, Any]:
    """The reply when its status is OK; else the one sentence its status calls for."""
    status, error = reply.get("status"), reply.get("error", "")
    if status == P.OK:
        return reply
    if status == P.INCOMPATIBLE:
        raise UsageError(f"The env server at {address} serves a different env: "
                         f"{error}; start it with the same env, kwargs and versions.")
    if status == P.BUSY:
        raise UsageError(f"The env server at {address} is busy ({error}); use fewer --workers "
                         "or start it with a larger --max-sessions.")
    if status == P.UNAUTHORIZED:
        raise UsageError(f"The env server at {address} refused the request: {error}.")
    if status == P.STALE and reply.get("reclaimed"):
        raise SessionReclaimed(f"The env server at {address} gave this spare session to "
                               "another client.")
    if status == P.STALE:
        raise ServerGone(f"The env server at {address} answered {what} STALE ({error}); the "
                         "episode cannot go on there.")
    raised = P.raised_from(error) or P.hung_from(error, address)
    if raised is not None:  # the env's own exception, as a local env would have raised it
        raise raised
    raise RuntimeError(f"the env server at {address} answered {what} with an error: {error}")


def row_error(sentence: str, address: str) -> Exception:
    """A vector row's error as the exception it stands for: what the env raised
    (:class:`EnvRaised`), a hung env's TimeoutError naming the server, else a RuntimeError
    saying the server's sentence."""
    return (P.raised_from(sentence) or P.hung_from(sentence, address)
            or RuntimeError(f"the env server at {address} says: {sentence}"))


def served_name(spec: dict[str, Any]) -> str | None:
    """The served env a spec names on its server (a suite's ``suite/task``), or None."""
    return spec["served"].get("name")


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    """The server's describe reply; a clear UsageError when none comes within 10 s, or
    when the server does not serve the task the spec names."""
    conn = connect(spec)
    address = spec["served"]["address"]
    wait = min(conn.timeout, 10.0)
    name = served_name(spec)
    try:
        reply = conn.call("describe", timeout=wait, env=name)
        if reply.get("status") == P.INCOMPATIBLE and reply.get("unknown"):
            envs = ", ".join(reply.get("envs") or [])
            if name is None:
                raise UsageError(f"The env server at {address} serves several envs ({envs}), "
                                 "the tasks of a suite; evaluate them with `rolltape eval "
                                 f"--suite SUITE --served {address}`.")
            raise UsageError(f"The env server at {address} does not serve task '{name}' (it "
                             f"serves {envs}); start one with `rolltape serve --suite SUITE` "
                             "for that task, or pick served tasks with --tasks.")
        expect_ok(reply, address, "describe")
        if reply.get("protocol") != P.PROTOCOL_VERSION:
            raise UsageError(f"The env server at {address} speaks protocol "
                             f"{reply.get('protocol')}, this rolltape speaks "
                             f"{P.PROTOCOL_VERSION}; run the same rolltape version on both "
                             "sides.")
        return reply
    except ServerGone as exc:
        if not exc.timed_out:
            raise UsageError(exc.strerror) from None
        how = (f"`rolltape serve {spec['id']} --bind HOST:PORT`" if name is None else
               f"`rolltape serve --suite SUITE --bind HOST:PORT` (the suite of task '{name}')")
        raise UsageError(f"No env server answers at {address} (waited {wait:g} s); start one "
                         f"with {how} or fix the address.") from None
    finally:
        conn.close()


def served_difference(spec: dict[str, Any], served: dict[str, Any]) -> dict[str, Any] | None:
    """How a server's descriptor differs from a spec in id, kwargs, time limit or versions
    (the spaces are compared when a worker opens a session, which builds the env)."""
    mine = {"id": spec["id"], "kwargs": spec.get("kwargs") or {},
            "gymnasium": spec["versions"].get("gymnasium"),
            "mujoco": spec["versions"].get("mujoco")}
    if spec.get("max_episode_steps") is not None:
        mine["max_episode_steps"] = spec["max_episode_steps"]
    return P.first_difference(mine, served)


def check_server(spec: dict[str, Any]) -> dict[str, Any]:
    """Before any work: the server answers and serves the env this spec describes."""
    reply = describe(spec)
    diff = served_difference(spec, reply["descriptor"])
    if diff is not None:
        name = served_name(spec)
        which = f" for task '{name}'" if name is not None else ""
        raise UsageError(f"The env server at {spec['served']['address']} serves a different "
                         f"env{which}: {P.difference_sentence(diff)}; start it with the same "
                         "env, kwargs and versions.")
    return reply


class RemotePhysicsLog:
    """The :class:`rolltape.envs.state.PhysicsLog` of a served env: rows come in the replies."""

    def __init__(self, env: RemoteEnv) -> None:
        self.env = env
        self.rows: list[np.ndarray] = []

    def record(self) -> None:
        self.rows.append(self.env.last_physics)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self.env.physics_dims is not None  # made only for an env with physics
        nq, nv = self.env.physics_dims
        return split_physics(np.stack(self.rows), nq, nv)


class ServedLives:
    """The part of ALE's interface SB3's EpisodicLifeEnv reads from a served game: its
    lives, as the server's last reply said."""

    def __init__(self) -> None:
        self.count = 0
        self.state = b""

    def lives(self) -> int:
        return self.count

    def keep(self, state: bytes) -> None:
        """The emulator state the server sent with its last reply (a server that sends
        none leaves the game without ``cloneState``: its tapes then hold no states)."""
        self.state = state
        self.cloneState = self._clone  # noqa: N815 (ALE's name, which AleLog calls)

    def _clone(self, include_rng: bool = True) -> ServedState:
        return ServedState(self.state)


class ServedState:
    """One serialized ALE state, as ``ALEState.serialize`` gives it."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def serialize(self) -> bytes:
        return self.blob


class RemoteEnv(gym.Env):  # a gymnasium.Env: policy-side wrappers go on it
    """A Gymnasium env whose steps run on a ``rolltape serve`` session."""

    def __init__(self, spec: dict[str, Any], local: Any, spare: bool = False) -> None:
        self.served_spec = spec
        self.spec_dict = local_spec(spec)
        self.address = spec["served"]["address"]
        self.observation_space = local.observation_space
        self.action_space = local.action_space
        self.metadata = dict(local.metadata)
        self.spec = local.spec
        self.render_mode = None
        self.descriptor = P.descriptor(self.spec_dict, local)
        self.conn = connect(spec)
        self.sid: str | None = None
        self.gen = 0
        self.last_physics: Any = None
        self.physics_dims: tuple[int, int] | None = None
        self._pending = 0  # the request id of the step sent by step_async
        # An Atari game: SB3's Atari wrappers (--wrapper atari) ask the env itself for its
        # action names (NoopReset, FireReset), lives (EpisodicLife) and np_random (the
        # no-op count): names from the local build, lives from each reply's info (ALE puts
        # them there), np_random seeded as ale-py's AtariEnv seeds its own.
        meanings = getattr(local.unwrapped, "get_action_meanings", None)
        self._meanings = list(meanings()) if callable(meanings) else None
        if self._meanings is not None:  # (only then: wrappers test for them with hasattr)
            self.ale = ServedLives()
            self.get_action_meanings = self._action_meanings
        try:
            reply = self._ok(self.conn.call("open", expect=self.descriptor,
                                            env=served_name(spec), spare=spare), "open")
        except BaseException:
            self.conn.close()
            raise
        self.sid, self.gen = reply["sid"], reply["gen"]
        dims = reply.get("physics")
        self.physics_dims = (int(dims[0]), int(dims[1])) if dims else None
        # What drew the observation's images (pass1.fields.image_facts): the server's GL.
        backend = reply.get("backend")
        self.gl_backend = backend if isinstance(backend, str) else None

    @classmethod
    def connect(cls, spec: dict[str, Any]) -> RemoteEnv:
        """Open a session for a served spec; the local env is built once, for its spaces."""
        local = make_env(local_spec(spec))
        try:
            return cls(spec, local)
        finally:
            local.close()

    def another(self) -> RemoteEnv:
        """A spare session of the same env on the same server (a worker playing several
        episodes at once holds one per episode): opened only while the server has room
        (else UsageError), and given up to a client that has no session when the server
        is full (its next request raises SessionReclaimed)."""
        return RemoteEnv(self.served_spec, self, spare=True)

    @property
    def unwrapped(self) -> RemoteEnv:
        return self

    def _action_meanings(self) -> list[str]:
        """An Atari game's action names, as ale-py's ``AtariEnv`` gives them."""
        return list(self._meanings or ())

    def _saw(self, info: dict[str, Any], seed: int | None = None,
             state: bytes | None = None) -> None:
        """An Atari game's lives from a reply, and at a seeded reset its np_random as
        ``AtariEnv.seed_game`` derives it (so that SB3's NoopResetEnv draws the no-op
        counts a local game would)."""
        if self._meanings is None:
            return
        if seed is not None:
            np_seed = np.random.SeedSequence(seed).generate_state(n_words=2)[0]
            self._np_random, _ = gym.utils.seeding.np_random(int(np_seed))
        if "lives" in info:
            self.ale.count = int(info["lives"])
        if state is not None:
            self.ale.keep(bytes(state))

    def physics_log(self) -> RemotePhysicsLog | None:
        return RemotePhysicsLog(self) if self.physics_dims is not None else None

    def _ok(self, reply: dict[str, Any], what: str) -> dict[str, Any]:
        return expect_ok(reply, self.address, what)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        reply = self._ok(self.conn.call("reset", sid=self.sid, gen=self.gen, seed=seed,
                                        options=options), "reset")
        self.gen = reply["gen"]
        self.last_physics = reply.get("physics")
        info = reply.get("info") or {}
        self._saw(info, seed, reply.get("ale_state"))
        return reply["obs"], info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.step_async(action)
        return self.step_wait()

    def step_async(self, action: Any) -> None:
        """Send a step without waiting for it (Gymnasium's vector envs' name): the worker
        chooses another episode's action while this one steps on the server."""
        self._pending = self.conn.send("step", sid=self.sid, gen=self.gen,
                                       action=np.asarray(action))

    def step_wait(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """What the step sent by :meth:`step_async` returned."""
        reply = self.conn.receive(self._pending, "step")
        if reply.get("status") != P.OK:
            self._ok(reply, "step")  # raises what the status calls for
        self.last_physics = reply.get("physics")
        info = reply.get("info") or {}
        self._saw(info, state=reply.get("ale_state"))
        return reply["obs"], reply["reward"], reply["terminated"], reply["truncated"], info

    def state(self) -> np.ndarray | None:
        return self._ok(self.conn.call("state", sid=self.sid, gen=self.gen), "state")["physics"]

    def render_frame(self, width: int, height: int, camera: str | None = None) -> np.ndarray:
        """The server's RGB frame of the session's current state."""
        return self._ok(self.conn.call("render", sid=self.sid, gen=self.gen, width=width,
                                       height=height, camera=camera), "render")["frame"]

    def close(self) -> None:
        """Close the session (best effort: a gone server frees it by its idle timeout)."""
        if self.sid is not None:
            try:
                self.conn.call("close", sid=self.sid, gen=self.gen,
                               timeout=min(self.conn.timeout, 5.0))
            except ServerGone:
                pass
            self.sid = None
        self.conn.close()


class RemoteVectorEnv:
    """``sessions`` vector sessions of the server's ``--num-envs`` N sub-envs each, stepped as
    one vector of sessions x N sub-envs (sub-env s is sub-env s % N of session s // N). A
    request goes to every session before any reply is read. Replies are merged in that
    order: ``obs`` stacked, ``reward``/``terminated``/``truncated`` arrays, and per sub-env an
    ``info``, a ``physics`` row (or None), an ``error`` (None, or what a sub-env that
    raised said: it must be reset before it steps again) and an Atari game's emulator
    state (``ale_states``; None for other envs)."""

    def __init__(self, spec: dict[str, Any], local: Any, sessions: int,
                 per_session: int | None = None) -> None:
        self.address = spec["served"]["address"]
        self.single_observation_space = local.observation_space
        self.single_action_space = local.action_space
        descriptor = P.descriptor(local_spec(spec), local)
        self.conns: list[Connection] = []
        self.sids: list[str] = []
        self.gens: list[int] = []
        self.per_session = 1
        try:
            for k in range(sessions):
                conn = connect(spec)
                self.conns.append(conn)
                if k == 0:  # how many sub-envs a session may hold: the server's --num-envs
                    described = expect_ok(conn.call("describe", env=served_name(spec)),
                                          self.address, "describe")
                    most = int(described.get("num_envs") or 1)
                    self.per_session = most if per_session is None else per_session
                reply = expect_ok(conn.call("open", expect=descriptor, env=served_name(spec),
                                            num_envs=self.per_session), self.address, "open")
                self.sids.append(reply["sid"])
                self.gens.append(reply["gen"])
        except BaseException:
            self.close()
            raise
        self.num_envs = self.per_session * sessions

    @classmethod
    def connect(cls, spec: dict[str, Any], sessions: int, per_session: int | None = None
                ) -> RemoteVectorEnv:
        """Open ``sessions`` vector sessions of ``per_session`` sub-envs (default: the
        server's --num-envs); the local env is built once, for its spaces."""
        local = make_env(local_spec(spec))
        try:
            return cls(spec, local, sessions, per_session)
        finally:
            local.close()

    def _all(self, op: str, args: list[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
        """Send ``op`` with ``args[k]`` to each session k (None: not that one), then read
        every reply; each must be OK."""
        rids = [None if a is None else conn.send(op, sid=sid, gen=gen, **a)
                for conn, sid, gen, a in zip(self.conns, self.sids, self.gens, args)]
        return [None if rid is None else expect_ok(conn.receive(rid, op), self.address, op)
                for conn, rid in zip(self.conns, rids)]

    def reset(self, seeds: list[int | None], mask: np.ndarray) -> dict[str, Any]:
        """Reset the sub-envs ``mask`` picks with their ``seeds``; the merged reply holds
        their rows only (``rows``: which sub-envs, in order)."""
        n = self.per_session
        args: list[dict[str, Any] | None] = []
        for k in range(len(self.conns)):
            part = mask[k * n:(k + 1) * n]
            args.append({"seeds": list(seeds[k * n:(k + 1) * n]),
                         "mask": [bool(m) for m in part]} if part.any() else None)
        replies = self._all("reset", args)
        for k, reply in enumerate(replies):
            if reply is not None:
                self.gens[k] = reply["gen"]
        merged = _merge([r for r in replies if r is not None])
        merged["rows"] = [int(i) for i in np.flatnonzero(mask)]
        return merged

    def step(self, actions: np.ndarray) -> dict[str, Any]:
        """Step every sub-env with its row of ``actions``."""
        n = self.per_session
        rows: list[dict[str, Any] | None] = [
            {"actions": np.ascontiguousarray(actions[k * n:(k + 1) * n])}
            for k in range(len(self.conns))]
        return _merge([r for r in self._all("step", rows) if r is not None])

    def close(self) -> None:
        """Close every session (best effort, as :meth:`RemoteEnv.close`)."""
        for conn, sid, gen in zip(self.conns, self.sids, self.gens):
            try:
                conn.call("close", sid=sid, gen=gen, timeout=min(conn.timeout, 5.0))
            except ServerGone:
                pass
        for conn in self.conns:
            conn.close()
        self.conns, self.sids = [], []


def _merge(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """One vector reply from the replies of several sessions, rows in session order."""
    if len(replies) == 1:
        out = dict(replies[0])
    else:
        out = {key: _join([r.get(key) for r in replies])
               for key in ("obs", "reward", "terminated", "truncated", "physics")}
        out["info"] = [i for r in replies for i in r["info"]]
        out["errors"] = [e for r in replies
                         for e in (r.get("errors") or [None] * len(r["info"]))]
        out["ale_states"] = [s for r in replies
                             for s in (r.get("ale_states") or [None] * len(r["info"]))]
    for key in ("errors", "ale_states"):  # nil or absent: none for any row
        if not out.get(key):
            out[key] = [None] * len(out["info"])
    return out


def _join(parts: list[Any]) -> Any:
    """Stacked rows of several replies, one after the other (a dict observation per key)."""
    if parts[0] is None:
        return None
    if isinstance(parts[0], dict):
        return {k: _join([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)
