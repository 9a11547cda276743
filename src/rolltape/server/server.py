"""``rolltape serve``: envs stepped for clients over zmq, one env or N sub-envs per session.

A ROUTER socket takes requests from any number of clients (DEALER sockets) and answers each
in turn, so that one process holds every env. Each session owns its env instance; requests
carry the session id, its generation (bumped by each reset; a restarted server knows no old
session) and a request id, so a repeated mutation or a stale generation is answered STALE
and never replayed. ``serve --suite`` serves every task of a suite from one process: a
request names its env by task (``suite/task``, the ``env`` field); a one-env server needs no
name. Safe by default: loopback unless a token is given, a payload cap, an
idle timeout that frees the env of a vanished client, a per-request time limit, and a bad
message gets an ERROR reply while the others keep being served.

``serve --num-envs N`` lets a session hold up to N sub-envs (the client asks how many when it
opens it): a vector session's reset and step requests carry one seed / one action row per
sub-env and get one reply with the observations stacked, rewards and flags as arrays, an
info, a physics row and an error (nil, or the sentence of a sub-env that raised) per
sub-env. A sub-env that raises, or hangs past --request-timeout, is rebuilt and must be
reset; only its own row says so, and the session's other sub-envs play on.

A session opened as a ``spare`` (a pass-1 worker's extra session, to play several episodes
at once) is opened only while the server has room, and is given up to a client that opens
its first session on a full server: its owner is answered STALE with ``reclaimed`` and
plays that episode again on a session it keeps.

May import: envs, flags, groups, server.protocol, server.address, server.frames, errors, suites (to read a
manifest), and pass2.backends (to pick the GL backend of render requests). Never: policies, pass 1, the
rest of pass 2, executors (the server runs no policy).
"""

from __future__ import annotations

import hmac
import os
import secrets
import signal
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from rolltape.address import bind_token, endpoint, split_host_port
from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.envs.state import ale_state, mujoco_data, physics_spec
from rolltape.errors import UsageError
from rolltape.flags import EPISODES, SERVER, Rule, check_flags, flag
from rolltape.groups import EnvOptions, Listener, SuiteOptions
from rolltape.server import protocol as P
from rolltape.server.frames import FrameDrawer
from rolltape.tape import json_safe

POLL_MS = 200  # how often the loop looks up from the socket (signals, idle sessions)
WATCHDOG_TICK = 0.25  # seconds between checks for an env call past --request-timeout


DEFAULT_BIND = "127.0.0.1:7450"  # serve's port when --bind is not given
# An env call's time limits, in seconds: above 0, and below what a wait can be given.
SECONDS = Rule(lambda v: 0 < v < 1e7, "be a number of seconds above 0 (and below 1e7)")


@dataclass(frozen=True)
class ServeConfig(Listener, EnvOptions, SuiteOptions):
    """Everything ``rolltape serve`` was asked for: the socket (:class:`Listener`), the env
    or the suite's tasks it serves, and the server's own limits. Each field's rule is
    checked on construction; ``bind`` None is :data:`DEFAULT_BIND`."""

    env: str | None = flag(None, "Gymnasium env id to serve (HalfCheetah-v5); leave it out "
                                 "with --suite.", panel=EPISODES, argument=True)
    idle_timeout: float = flag(300.0, "Seconds without a request before a session's env is "
                                      "closed (a vanished client).", panel=SERVER,
                               rule=SECONDS)
    request_timeout: float = flag(60.0, "Seconds one env call may take.", panel=SERVER,
                                  rule=SECONDS)
    backend: str | None = flag(None, "GL backend for render requests (egl, osmesa; default "
                                     "MUJOCO_GL, else egl).", panel=SERVER)
    num_envs: int = flag(1, "Sub-envs a session may hold, stepped together in one request "
                            "(eval --batched-inference steps them).", panel=SERVER,
                         rule=Rule(lambda v: 1 <= v <= P.MAX_SUB_ENVS,
                                   f"be from 1 to {P.MAX_SUB_ENVS}"))

    def __post_init__(self) -> None:
        check_flags(self)
        if self.bind is None:
            object.__setattr__(self, "bind", DEFAULT_BIND)
        if self.backend is not None:  # one known name, as render's --backends spells them
            from rolltape.pass2.backends import parse_backends

            (backend,) = parse_backends([self.backend])
            object.__setattr__(self, "backend", backend)

    def served_specs(self, tasks_flag: str = "--tasks") -> dict[str, dict[str, Any]]:
        """The env spec of each served name: the env's id, or each task's ``suite/task``
        with the env as the suite resolves it (id, kwargs, max episode steps); a task not
        in the suite is refused naming ``tasks_flag``."""
        if self.suite is None:
            if self.env is None:
                raise UsageError("Give an env to serve (e.g. HalfCheetah-v5) or --suite NAME.")
            if self.tasks is not None:
                raise UsageError("--tasks picks tasks of a suite; give --suite too.")
            spec = env_spec(self.env, self.env_kwargs, self.max_episode_steps)
            return {spec["id"]: spec}
        if self.env is not None or self.env_kwargs:
            raise UsageError(f"Give either an env or --suite ('{self.suite}'), not both: a "
                             "suite names its envs and their kwargs.")
        from rolltape.suites.builtin import check_installed, resolve_suite
        from rolltape.suites.manifest import select_tasks, with_defaults

        manifest = with_defaults(select_tasks(resolve_suite(self.suite), self.tasks,
                                              tasks_flag), 1, self.max_episode_steps)
        for task in manifest.tasks:
            check_installed(task)
        return {t.key: env_spec(t.env, t.kwargs, t.max_episode_steps) for t in manifest.tasks}

    def check(self) -> tuple[str, int, str | None]:
        """(host, port, token), refusing what cannot be served safely."""
        host, port = split_host_port(self.bind or DEFAULT_BIND, "--bind")
        return host, port, bind_token(self.bind or DEFAULT_BIND, host, self.token_file)


class Reply(Exception):
    """A reply other than OK (STALE, INCOMPATIBLE), raised where it is decided:
    :meth:`EnvServer.handle` sends it as it is, so an operation never checks what a helper
    returned."""

    def __init__(self, status: str, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.reply: dict[str, Any] = {"status": status, "error": error, **extra}


class _Timeout(Exception):
    """An env call ran past --request-timeout."""


@dataclass(frozen=True)
class Served:
    """One env the server serves: its spec, the descriptor clients must match, its MuJoCo
    sizes (None: no MuJoCo physics) and its metadata."""

    name: str
    spec: dict[str, Any]
    descriptor: dict[str, Any]
    nq_nv: tuple[int, int] | None
    metadata: dict[str, Any]
    state_size: int | None = None  # of a MuJoCo physics row (None: no MuJoCo physics)
    # The action space's shape and dtype (None: a space without one takes any dtype).
    action: tuple[tuple[int, ...], np.dtype | None] = ((), None)
    observation_space: Any = None  # how a vector session stacks its sub-envs' observations

    @classmethod
    def probe(cls, name: str, spec: dict[str, Any]) -> Served:
        """Build the env once, to describe it."""
        env = make_env(spec)
        try:
            nq_nv = state_size = None
            if mujoco_data(env) is not None:
                import mujoco

                model = env.unwrapped.model
                nq_nv = (int(model.nq), int(model.nv))
                state_size = int(mujoco.mj_stateSize(model, physics_spec()))
            space = env.action_space
            action = (tuple(getattr(space, "shape", None) or ()),
                      getattr(space, "dtype", None))
            return cls(name, spec, P.descriptor(spec, env), nq_nv,
                       json_safe(dict(env.metadata)), state_size, action,
                       env.observation_space)
        finally:
            env.close()


@dataclass
class Session:
    """One client's env (or sub-envs): its generation, the last request id it used, when it
    was last seen."""

    envs: list[Any]  # one, or a vector session's sub-envs (None: one gone, see _rebuild)
    served: Served
    vector: bool = False  # opened with num_envs: its requests carry a row per sub-env
    gen: int = 0
    last_rid: int = 0
    seen: float = field(default_factory=time.monotonic)
    reset_done: bool = False
    drawer: FrameDrawer | None = None
    ready: list[bool] = field(default_factory=list)  # per sub-env: reset since built
    spare: bool = False  # a worker's extra session: given up to a client that has none

    @property
    def env(self) -> Any:
        return self.envs[0]


class EnvServer:
    """The served env and its sessions; :meth:`serve_forever` answers until told to stop."""

    def __init__(self, cfg: ServeConfig, log: Callable[[str], None] = print) -> None:
        import zmq

        self.cfg, self.log = cfg, log
        host, port, self.token = cfg.check()
        self.envs = {name: Served.probe(name, spec) for name, spec in cfg.served_specs().items()}
        first = next(iter(self.envs.values()))
        # A one-env server's env, as callers of the one-env server read it.
        self.spec, self.descriptor = first.spec, first.descriptor
        self.boot = secrets.token_hex(4)  # a restarted server knows none of the old sessions
        self.refused, self._refused_logged = 0, -1.0  # requests without the right token
        self.sessions: dict[str, Session] = {}
        self.opened = 0
        # Spare sessions given to clients that had none (newest last), so that their
        # owner's next request is told why (a bounded memory: a sid is never reused).
        self.reclaimed: OrderedDict[str, None] = OrderedDict()
        self.reclaimed_count = 0
        self.stopping = False
        self.stopped_by: int | None = None  # the signal that stopped serve_forever
        self._ops = {op: getattr(self, f"_op_{op}") for op in P.OPS}
        self._call_started: float | None = None  # when the env call under way began
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self._more = zmq.SNDMORE
        self.socket.setsockopt(zmq.LINGER, 0)
        # zmq drops a peer whose message is far past the cap before buffering it all; one a
        # little past it is read, and answered ERROR by the decoder.
        self.socket.setsockopt(zmq.MAXMSGSIZE, 4 * cfg.max_payload + 4096)
        if ":" in host:
            self.socket.setsockopt(zmq.IPV6, 1)
        try:
            if port == 0:
                self.socket.bind(endpoint(host, "*"))
            else:
                self.socket.bind(endpoint(host, port))
        except zmq.ZMQError as exc:
            self.close()
            if exc.errno == zmq.EADDRINUSE:
                raise UsageError(f"Port {port} on {host} is in use; stop what uses it or choose "
                                 "another with --bind HOST:PORT (port 0 picks a free one).") \
                    from None
            raise UsageError(f"Cannot bind {self.cfg.bind} ({exc.strerror}); give --bind "
                             "HOST:PORT with an address of this machine.") from None
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    # -- the loop ----------------------------------------------------------------------

    def serve_forever(self, max_seconds: float | None = None) -> None:
        """Answer requests until SIGTERM/SIGINT (or ``max_seconds``), then close every env."""
        import zmq

        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        # A watchdog tick, armed once: each env call only notes when it began, where arming
        # and disarming a timer per call cost two system calls a step.
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._watchdog)
        tick = min(WATCHDOG_TICK, self.cfg.request_timeout / 4)
        signal.setitimer(signal.ITIMER_REAL, tick, tick)
        # A blocking receive that gives up every POLL_MS, so that idle sessions, signals and
        # max_seconds get a turn: one call per request, where poll-then-receive was two.
        self.socket.setsockopt(zmq.RCVTIMEO, POLL_MS)
        until = None if max_seconds is None else time.monotonic() + max_seconds
        idle_check = time.monotonic() + POLL_MS / 1000
        try:
            while not self.stopping and (until is None or time.monotonic() < until):
                try:
                    self._answer(self.socket.recv_multipart())
                except zmq.Again:
                    pass
                if time.monotonic() >= idle_check:
                    self._drop_idle()
                    idle_check = time.monotonic() + POLL_MS / 1000
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for s, handler in previous.items():
                signal.signal(s, handler)
            closed = self.close()
            self.log(f"stopped: closed {closed} session(s)")

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
        self.stopped_by = signum

    def close(self) -> int:
        """Close every session's env and the socket; return how many sessions were open."""
        closed = len(self.sessions)
        for sid in list(self.sessions):
            self._close_session(sid)
        self.socket.close(0)
        self.context.term()
        return closed

    def _answer(self, frames: list[bytes]) -> None:
        # A DEALER's request is [identity, payload]; a REQ's [identity, b"", payload].
        if len(frames) < 2:
            return
        envelope, payload = frames[:-1], frames[-1]
        if len(frames) > 3 or (len(frames) == 3 and frames[1] != b""):
            envelope = frames[:1]
            reply: dict[str, Any] = {"status": P.ERROR, "rid": None,
                                     "error": "a request is one msgpack frame"}
        else:
            reply = self.handle(payload)
        try:
            data = P.encode(reply)
        except (TypeError, ValueError, OverflowError) as exc:  # an env sent something odd
            data = P.encode({"status": P.ERROR, "rid": reply.get("rid"),
                             "error": f"the reply could not be encoded ({exc})"})
        for frame in envelope:  # send_multipart's checks cost more than these sends
            self.socket.send(frame, self._more)
        self.socket.send(data)

    def handle(self, payload: bytes) -> dict[str, Any]:
        """The reply to one request's bytes; never raises for anything a client sends."""
        rid = message = None
        try:
            if self.token is not None:  # checked before decoding: a stranger's large
                sent = P.peek_token(payload)  # message is never expanded
                if not hmac.compare_digest((sent or "").encode(), self.token.encode()):
                    return self._refuse(None, bool(sent))
            message = P.check_request(P.decode(payload, self.cfg.max_payload))
            rid = message.get("rid", 0)
            reply = self._ops[message["op"]](message)
        except Reply as exc:
            reply = dict(exc.reply)
        except P.ProtocolError as exc:
            reply = {"status": P.ERROR, "error": str(exc)}
        except UsageError as exc:
            reply = {"status": P.ERROR, "error": str(exc)}
        except _Timeout:  # the env may be half-way through a call: its session is not reused
            if message and message.get("sid") is not None:
                self.sessions.pop(message["sid"], None)
            reply = {"status": P.ERROR,
                     "error": P.env_hung(message["op"] if message else "the request",
                                         self.cfg.request_timeout)}
        except Exception as exc:  # the env failed this call: say so, keep serving
            reply = {"status": P.ERROR, "error": P.env_raised(exc)}
        reply.setdefault("rid", rid)
        return reply

    def _refuse(self, rid: Any, sent: bool) -> dict[str, Any]:
        """UNAUTHORIZED, saying whether the token was missing or wrong; the server's log
        says so too, at most once a second (with how many since), so that a client
        knocking with a bad token is seen but cannot flood the log."""
        self.refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= 1.0:
            self.log(f"refused {self.refused} request(s) with a {'wrong' if sent else 'missing'} "
                     "token so far")
            self._refused_logged = now
        why = ("the token sent is not this server's (ROLLTAPE_TOKEN_FILE names another file "
               "than the server's --token-file)" if sent else
               "the server needs its token (set ROLLTAPE_TOKEN_FILE to the file the server "
               "was started with)")
        return {"status": P.UNAUTHORIZED, "rid": rid, "error": why}

    # -- sessions ----------------------------------------------------------------------

    def _session(self, message: dict[str, Any], mutation: bool) -> Session:
        """The session a request names; else the STALE reply it gets is raised."""
        sid = message.get("sid")
        session = self.sessions.get(sid) if sid is not None else None
        if session is None and sid in self.reclaimed:
            raise Reply(P.STALE, "this spare session was given to another client, as the "
                        "server was full", reclaimed=True)
        if session is None:
            raise Reply(P.STALE, "the session is not open on this server (it was closed, "
                        "timed out, or the server restarted)")
        session.seen = time.monotonic()
        if mutation:
            if message["rid"] <= session.last_rid:
                raise Reply(P.STALE, f"request id {message['rid']} was already used (last "
                            f"{session.last_rid}); a mutation is never replayed")
            if message["op"] == "step" and message["gen"] != session.gen:
                raise Reply(P.STALE, f"generation {message['gen']} is stale (the session is "
                            f"at {session.gen})")
            session.last_rid = message["rid"]
        return session

    def _reclaim(self) -> bool:
        """Close the newest spare session, for a client that has no session yet; False when
        every session is a client's first. A worker opens spares only while the server has
        room (``open`` with ``spare``), to play several episodes at once; the one whose
        spare is taken is answered STALE with ``reclaimed`` and plays that episode again on
        a session it keeps, so every client that fits --max-sessions with one session is
        served."""
        spares = [sid for sid, session in self.sessions.items() if session.spare]
        if not spares:
            return False
        self._close_session(spares[-1])
        self.reclaimed[spares[-1]] = None
        while len(self.reclaimed) > 4096:
            self.reclaimed.popitem(last=False)
        self.reclaimed_count += 1
        return True

    def _drop_idle(self) -> None:
        now = time.monotonic()
        for sid, session in list(self.sessions.items()):
            if now - session.seen > self.cfg.idle_timeout:
                self._close_session(sid)
                self.log(f"closed idle session {sid} (no request for "
                         f"{self.cfg.idle_timeout:g} s)")

    def _close_session(self, sid: str) -> None:
        session = self.sessions.pop(sid, None)
        if session is not None:
            try:
                for env in session.envs:
                    if env is not None:  # a sub-env that could not be built again
                        env.close()
            finally:
                if session.drawer is not None:
                    session.drawer.close()

    def _watchdog(self, signum: int, frame: Any) -> None:
        started = self._call_started
        if started is not None and time.monotonic() - started > self.cfg.request_timeout:
            self._call_started = None  # one cut per call
            raise _Timeout

    def _timed(self, call: Callable[[], Any]) -> Any:
        """Run an env call under --request-timeout: the watchdog tick that
        :meth:`serve_forever` arms cuts a call that runs past it (:meth:`handle` then drops
        its session)."""
        self._call_started = time.monotonic()
        try:
            return call()
        finally:
            self._call_started = None

    def _served(self, message: dict[str, Any]) -> Served:
        """The env a describe or open names (``env``; none needed when one is served); for a
        name this server does not serve, the INCOMPATIBLE reply (``unknown``: True) is
        raised."""
        name = message.get("env")
        if name is not None and not isinstance(name, str):
            raise P.ProtocolError("'env' must be the name of a served env, or nil")
        if name is None and len(self.envs) == 1:
            return next(iter(self.envs.values()))
        if name in self.envs:
            return self.envs[name]
        names = ", ".join(self.envs)
        problem = (f"it serves no env named '{name}' (it serves {names})" if name is not None
                   else f"it serves {len(self.envs)} envs ({names}); a request names one")
        raise Reply(P.INCOMPATIBLE, problem, unknown=True, envs=list(self.envs))

    def _physics(self, session: Session, env: Any = None, out: np.ndarray | None = None
                 ) -> np.ndarray | None:
        """The MuJoCo state row of ``env`` (default: the session's), written into ``out``
        when given; None for an env without MuJoCo physics."""
        if session.served.state_size is None:  # set with nq_nv: no MuJoCo physics
            return None
        import mujoco

        base = (session.env if env is None else env).unwrapped
        row = np.empty(session.served.state_size) if out is None else out
        mujoco.mj_getState(base.model, base.data, row, physics_spec())
        return row

    # -- operations --------------------------------------------------------------------

    def _op_describe(self, message: dict[str, Any]) -> dict[str, Any]:
        served = self._served(message)
        return {"status": P.OK, "protocol": P.PROTOCOL_VERSION, "name": served.name,
                "envs": list(self.envs), "descriptor": served.descriptor,
                "spec": served.spec, "sessions": len(self.sessions),
                "max_sessions": self.cfg.max_sessions, "boot": self.boot,
                "backend": os.environ.get("MUJOCO_GL"), "physics": served.nq_nv,
                "metadata": served.metadata, "num_envs": self.cfg.num_envs}

    def _op_open(self, message: dict[str, Any]) -> dict[str, Any]:
        expected = message.get("expect")
        if not isinstance(expected, dict):
            raise P.ProtocolError("open needs the descriptor the client expects ('expect')")
        served = self._served(message)
        diff = P.first_difference(expected, served.descriptor)
        problem = None if diff is None else P.difference_sentence(diff)
        if problem is None and expected.get("hash") not in (None, served.descriptor["hash"]):
            problem = (f"the served env differs in its descriptor hash: this side expects "
                       f"{expected['hash']}, the server has {served.descriptor['hash']}")
        if problem is not None:
            return {"status": P.INCOMPATIBLE, "error": problem}
        count = message.get("num_envs")
        if count is not None and (type(count) is not int or
                                  not 1 <= count <= self.cfg.num_envs):
            raise P.ProtocolError(f"'num_envs' must be nil or an integer from 1 to "
                                  f"{self.cfg.num_envs} (this server's --num-envs)")
        spare = message.get("spare", False)
        if type(spare) is not bool:
            raise P.ProtocolError("'spare' must be true or false")
        if len(self.sessions) >= self.cfg.max_sessions and (spare or not self._reclaim()):
            return {"status": P.BUSY, "error": f"the server already serves its "
                    f"--max-sessions {self.cfg.max_sessions} session(s)"}
        self.opened += 1
        sid = f"{self.boot}-{self.opened}-{secrets.token_hex(4)}"
        envs = [make_env(served.spec) for _ in range(count or 1)]
        self.sessions[sid] = Session(envs=envs, served=served, vector=count is not None,
                                     last_rid=message["rid"], ready=[False] * len(envs),
                                     spare=spare)
        # backend: the GL backend this process draws with, which a pixel observation's
        # tape records (pass 2 compares images only when it draws with the same one).
        return {"status": P.OK, "sid": sid, "gen": 0, "physics": served.nq_nv,
                "num_envs": len(envs), "backend": os.environ.get("MUJOCO_GL")}

    def _op_reset(self, message: dict[str, Any]) -> dict[str, Any]:
        session = self._session(message, mutation=True)
        if session.vector:
            return self._reset_vector(session, message)
        seed, options = message.get("seed"), message.get("options")
        _check_seed(seed)
        if options is not None and not isinstance(options, dict):
            raise P.ProtocolError("the reset options must be nil or a map")
        obs, info = self._timed(lambda: session.env.reset(seed=seed, options=options))
        session.gen += 1
        session.reset_done = True
        return {"status": P.OK, "gen": session.gen, "obs": _obs(obs), "info": _info(info),
                "physics": self._physics(session), "ale_state": ale_state(session.env)}

    def _op_step(self, message: dict[str, Any]) -> dict[str, Any]:
        session = self._session(message, mutation=True)
        if session.vector:
            return self._step_vector(session, message)
        if not session.reset_done:
            raise P.ProtocolError("step before reset: reset the session first")
        action = _action(message.get("action"), *session.served.action)
        obs, reward, term, trunc, info = self._timed(lambda: session.env.step(action))
        # None stays None, as the local tape turns it into NaN the same way.
        return {"status": P.OK, "obs": _obs(obs),
                "reward": None if reward is None else float(reward),
                "terminated": bool(term), "truncated": bool(trunc), "info": _info(info),
                "physics": self._physics(session), "ale_state": ale_state(session.env)}

    # -- vector sessions -----------------------------------------------------------------

    def _reset_vector(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        """Reset the sub-envs ``mask`` picks (default: all), each with its seed from
        ``seeds``; the reply holds their rows only, in order."""
        n = len(session.envs)
        seeds, mask = message.get("seeds"), message.get("mask")
        if type(seeds) is not list or len(seeds) != n:
            raise P.ProtocolError(f"a vector reset needs 'seeds', a list of {n} seeds (nil "
                                  "or integers), one per sub-env")
        for seed in seeds:
            _check_seed(seed)
        rows = list(range(n)) if mask is None else _mask_rows(mask, n)
        results: list[tuple[Any, Any]] = []
        errors: list[str | None] = []
        for i in rows:
            env = session.envs[i]
            try:
                if env is None:  # it could not be built again after it failed: try again
                    env = session.envs[i] = self._timed(lambda: make_env(session.served.spec))
                results.append(self._timed(lambda: env.reset(seed=seeds[i])))
                session.ready[i] = True
                errors.append(None)
            except Exception as exc:  # this sub-env failed or hung: only its row says so
                results.append((None, {}))
                errors.append(self._rebuild(session, i, exc, "reset"))
        session.gen += 1
        session.reset_done = True
        return {"status": P.OK, "gen": session.gen, **self._rows(session, rows, results, errors)}

    def _step_vector(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        """Step every sub-env with its row of ``actions`` (shape: sub-envs x action)."""
        n = len(session.envs)
        shape, dtype = session.served.action
        actions = message.get("actions")
        if not isinstance(actions, np.ndarray) or actions.shape != (n, *shape):
            got = actions.shape if isinstance(actions, np.ndarray) else type(actions).__name__
            raise P.ProtocolError(f"a vector step needs 'actions', an array of shape "
                                  f"{(n, *shape)} (one action per sub-env), got {got}")
        _check_dtype(actions.dtype, dtype)
        rewards = np.zeros(n)
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        results: list[tuple[Any, Any]] = []
        errors: list[str | None] = []
        for i, env in enumerate(session.envs):
            if not session.ready[i]:
                results.append((None, {}))
                errors.append("step before reset: this sub-env must be reset first")
                continue
            action = actions[i]
            try:
                obs, reward, term, trunc, info = self._timed(lambda: env.step(action))
            except Exception as exc:  # this sub-env failed or hung: only its row says so
                results.append((None, {}))
                errors.append(self._rebuild(session, i, exc, "step"))
                continue
            # As AsyncVectorEnv stacks them: float64 (None becomes NaN), bools.
            rewards[i] = np.nan if reward is None else reward
            terminated[i], truncated[i] = bool(term), bool(trunc)
            results.append((obs, info))
            errors.append(None)
        return {"status": P.OK, "reward": rewards, "terminated": terminated,
                "truncated": truncated, **self._rows(session, range(n), results, errors)}

    def _rebuild(self, session: Session, i: int, exc: Exception, op: str) -> str:
        """Replace sub-env ``i`` after it raised or hung past --request-timeout (it may be
        half-way through a call); return what its row's error says. Only that sub-env's
        episode fails: the session and its other sub-envs serve on. One that cannot be
        built again now is left None: its next reset tries again."""
        old, session.envs[i] = session.envs[i], None
        session.ready[i] = False
        if old is not None:
            try:
                self._timed(old.close)
            except Exception:  # a broken env may fail (or hang) to close: dropped anyway
                pass
        try:
            session.envs[i] = self._timed(lambda: make_env(session.served.spec))
        except Exception:  # left None: its next reset tries again, and says why if it fails
            pass
        if isinstance(exc, _Timeout):
            return P.env_hung(op, self.cfg.request_timeout)
        return P.env_raised(exc)

    def _rows(self, session: Session, rows: Any, results: list[tuple[Any, Any]],
              errors: list[str | None]) -> dict[str, Any]:
        """The per-sub-env part of a vector reply: observations stacked as AsyncVectorEnv
        stacks them (zeros for a failed row), infos, physics rows, errors (nil: none) and,
        for an Atari game, each row's emulator state (``ale_states``)."""
        from gymnasium.vector.utils import concatenate, create_empty_array

        space = session.served.observation_space
        filler = None
        items = []
        for obs, _ in results:
            if obs is None:
                if filler is None:
                    filler = create_empty_array(space, 1, fn=np.zeros)
                    filler = next(iter_rows(space, filler))
                obs = filler
            items.append(obs)
        out: Any = create_empty_array(space, len(items), fn=np.empty)
        stacked = concatenate(space, items, out)
        physics = None
        if session.served.state_size is not None:
            physics = np.zeros((len(items), session.served.state_size))
            for k, i in enumerate(rows):
                if errors[k] is None:
                    self._physics(session, session.envs[i], physics[k])
        # An Atari game's emulator state per row, as a one-env session sends it (nil for a
        # failed row; the key is left out for other envs).
        states = [None if errors[k] is not None else ale_state(session.envs[i])
                  for k, i in enumerate(rows)]
        return {"obs": _obs(stacked), "info": [_info(info) for _, info in results],
                "physics": physics, "errors": errors if any(errors) else None,
                **({"ale_states": states} if any(s is not None for s in states) else {})}

    def _op_state(self, message: dict[str, Any]) -> dict[str, Any]:
        session = self._session(message, mutation=False)
        if session.vector:
            raise P.ProtocolError(f"{message['op']} takes a one-env session; a vector "
                                  "session's physics rows come with each reply")
        return {"status": P.OK, "gen": session.gen, "physics": self._physics(session)}

    def _op_render(self, message: dict[str, Any]) -> dict[str, Any]:
        session = self._session(message, mutation=False)
        if session.vector:
            raise P.ProtocolError(f"{message['op']} takes a one-env session; a vector "
                                  "session's physics rows come with each reply")
        physics = self._physics(session)
        if physics is None:
            raise P.ProtocolError("render draws MuJoCo states; this env has none")
        if session.drawer is None:
            session.drawer = FrameDrawer(session.served.spec)
        drawer = session.drawer
        frame = self._timed(lambda: drawer.draw(
            physics, message.get("width"), message.get("height"), message.get("camera")))
        return {"status": P.OK, "frame": frame, "backend": os.environ.get("MUJOCO_GL")}

    def _op_close(self, message: dict[str, Any]) -> dict[str, Any]:
        self._session(message, mutation=True)  # a STALE request closes nothing
        self._close_session(message["sid"])
        return {"status": P.OK}

    def _op_stats(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"status": P.OK, "sessions": len(self.sessions), "opened": self.opened,
                "spare": sum(session.spare for session in self.sessions.values()),
                "reclaimed": self.reclaimed_count}


def _obs(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {str(k): _obs(v) for k, v in obs.items()}
    if isinstance(obs, str):  # a Text space's value (LeRobot's "task"): msgpack's own str
        return obs
    return np.asarray(obs)


# Values msgpack carries as they are (np.float64 is a float subclass: packed as a double).
_PLAIN = frozenset({bool, int, float, str, type(None), np.float64})


def _info(info: Any, depth: int = 0) -> Any:
    """An info dict as the wire carries it: arrays and numbers kept exactly, the rest as text."""
    if type(info) in _PLAIN:
        return info
    if depth > 8:
        return str(info)
    if isinstance(info, dict):  # most are one level of plain numbers: no call per value
        return {str(k): v if type(v) in _PLAIN else _info(v, depth + 1)
                for k, v in info.items()}
    if isinstance(info, (list, tuple)):
        return [_info(v, depth + 1) for v in info]
    if isinstance(info, np.ndarray):
        return info if info.dtype.kind in P.ARRAY_KINDS else info.tolist()
    if info is None or isinstance(info, (bool, int, float, str, np.generic)):
        return info.item() if isinstance(info, np.generic) else info
    return str(info)


def iter_rows(space: Any, stacked: Any) -> Any:
    """The rows of a stacked observation (gymnasium's ``iterate``)."""
    from gymnasium.vector.utils import iterate

    return iterate(space, stacked)


def _check_seed(seed: Any) -> None:
    if seed is not None and (type(seed) is not int or not 0 <= seed < 2**64):
        raise P.ProtocolError("the reset seed must be nil or an integer from 0 to 2**64-1")


def _mask_rows(mask: Any, n: int) -> list[int]:
    """The sub-envs a reset ``mask`` (n bools, a list or a bool array) picks."""
    if isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (n,):
        return [int(i) for i in np.flatnonzero(mask)]
    if type(mask) is list and len(mask) == n and all(type(m) is bool for m in mask):
        return [i for i, m in enumerate(mask) if m]
    raise P.ProtocolError(f"a vector reset's 'mask' must be nil or {n} booleans, one per "
                          "sub-env")


def _check_dtype(got: np.dtype, dtype: np.dtype | None) -> None:
    """Refuse an action dtype of another kind than the action space's (ints pass as ints)."""
    if dtype is not None and got.kind != dtype.kind and not (got.kind in "iu" and
                                                             dtype.kind in "iu"):
        raise P.ProtocolError(f"the action has dtype {got}, the action space takes {dtype}")


def _action(value: Any, shape: tuple[int, ...], dtype: np.dtype | None) -> Any:
    """The action a step request carries, refused unless its shape and dtype fit the
    action space's (``shape``, ``dtype``)."""
    if type(value) in (int, float):  # a bare number, from a client other than RemoteEnv
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise P.ProtocolError(f"the action must be an array of shape {shape}")
    if value.shape != shape:
        raise P.ProtocolError(f"the action has shape {value.shape}, the action space takes "
                              f"{shape}")
    _check_dtype(value.dtype, dtype)
    return value[()] if value.shape == () else value


def serve(cfg: ServeConfig) -> int | None:
    """``rolltape serve``: build the server, print where it listens, answer until stopped;
    return the signal that stopped it (None: it stopped by itself)."""
    try:
        import msgpack  # noqa: F401
        import zmq  # noqa: F401
    except ImportError:
        raise P.missing_extra() from None
    if cfg.backend is not None:
        from rolltape.pass2.backends import select_backend_in_this_process

        select_backend_in_this_process(cfg.backend)
    elif not os.environ.get("MUJOCO_GL"):
        os.environ.update({"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"})
    server = EnvServer(cfg, log=lambda line: print(line, flush=True))
    if cfg.suite is None:
        print(f"serving {server.spec['id']} on {server.address} (descriptor "
              f"{server.descriptor['hash']}, up to {cfg.max_sessions} session(s)); "
              f"clients use {server.address}/{server.spec['id']}", flush=True)
    else:
        print(f"serving {len(server.envs)} task(s) of {cfg.suite} ({', '.join(server.envs)}) "
              f"on {server.address} (up to {cfg.max_sessions} session(s)); clients use "
              f"`rolltape eval --suite {cfg.suite} --served {server.address}`", flush=True)
    sys.stdout.flush()
    server.serve_forever()
    return server.stopped_by

