"""Gymnasium's HalfCheetah-v5 and Ant-v5 on MuJoCo Warp: N worlds stepped at once (issue 41).

Everything that defines the task comes from Gymnasium's own env, built once with the user's
kwargs and kept as the *host*: the MuJoCo model MJWarp is given, the reward terms' weights and
ranges, ``frame_skip`` and ``dt``, and the reset distribution (a world reset with seed *s* is
given the state the host's own ``reset(seed=s)`` drew, so the noise is Gymnasium's bit for
bit). Only the physics runs on MJWarp. Observations, rewards and terminations are then
computed from the state as Gymnasium's env computes them, for all worlds at once
(:func:`observe`, :func:`score`), in float64 like Gymnasium.

MJWarp is not bitwise MuJoCo: it computes in float32 (a world's state is Gymnasium's cast to
float32) and its solver may round differently, so an episode here stays close to Gymnasium's
on the same seed for a while, not equal. Two things are exact and tested: the formulas
(:func:`observe` and :func:`score` given Gymnasium's own MjData quantities return Gymnasium's
values bit for bit) and the reset distribution. On Warp's CPU device a world's steps do not
depend on how many worlds run beside it, which is what lets a tape made in a batch of 4,096
be re-simulated alone (pass 2's verification of MJWarp tapes).

Where Gymnasium reads a stale quantity, so does this: after ``mj_step`` a body's ``xpos`` is
the one of the last substep's start (Ant's forward velocity uses it), and ``cfrc_ext`` comes
from ``mj_rnePostConstraint`` after the last substep; both are what MJWarp's ``step`` and
``rne_postconstraint`` leave. After a reset ``cfrc_ext`` is zero, as ``mj_resetData`` leaves it.

Warp compiles its kernels on first use (about 32 s of CPU for both envs on a 2-core machine,
cached by Warp afterwards); ``warp.config.kernel_cache_dir`` or ``WARP_CACHE_PATH`` chooses
where.

The env side, shared by pass 1 (which plays policies on it) and pass 2 (which re-simulates
MJWarp tapes on it). May import: numpy, gymnasium, mujoco, warp and mujoco_warp (the
``rolltape[mjwarp]`` extra), envs, errors. Never: policies, pass 1, pass 2, executors, outputs.

Example (not run: it compiles Warp kernels):
    >>> env = MJWarpEnv("HalfCheetah-v5", num_worlds=64)
    >>> obs = env.reset(seeds=range(64))            # world i: Gymnasium's reset(seed=i)
    >>> obs, rewards, terminated = env.step(actions)  # actions: (64, 6)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import gymnasium
import numpy as np

from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError

#: The Gymnasium envs whose rewards, observations and terminations :func:`score` and
#: :func:`observe` compute (the locomotion envs come first, issue 41).
SUPPORTED = ("HalfCheetah-v5", "Ant-v5")


@dataclass(frozen=True)
class Terms:
    """The parts of a Gymnasium env's reward, observation and termination, as that env was
    built (read from the env itself, so every kwarg a user passed is honoured once)."""

    env_id: str
    dt: float
    forward_reward_weight: float
    ctrl_cost_weight: float
    #: qpos entries left out of the observation (the root's x, or x and y)
    skipped_qpos: int
    #: Ant's: the body whose xy displacement is the forward velocity; None: qpos[0]'s
    main_body: int | None = None
    contact_cost_weight: float = 0.0
    healthy_reward: float = 0.0
    terminate_when_unhealthy: bool = False
    healthy_z_range: tuple[float, float] | None = None
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    include_cfrc_ext: bool = False


def terms_of(env: Any) -> Terms:
    """The :class:`Terms` of a built Gymnasium HalfCheetah-v5 or Ant-v5 (wrapped or not)."""
    base = env.unwrapped
    env_id = env.spec.id if env.spec is not None else type(base).__name__
    if env_id not in SUPPORTED:
        _refuse(env_id)
    skipped = int(base._exclude_current_positions_from_observation)
    common = Terms(env_id=env_id, dt=float(base.dt),
                   forward_reward_weight=float(base._forward_reward_weight),
                   ctrl_cost_weight=float(base._ctrl_cost_weight), skipped_qpos=skipped)
    if env_id == "HalfCheetah-v5":
        return common
    import mujoco  # here: the orchestrator reads SUPPORTED and time_limit, and never loads it

    body = base._main_body  # Ant-v5: an id or a name
    main_body = (body if isinstance(body, int)
                 else mujoco.mj_name2id(base.model, mujoco.mjtObj.mjOBJ_BODY, body))
    low_z, high_z = base._healthy_z_range
    low_f, high_f = base._contact_force_range
    return dataclasses.replace(
        common, skipped_qpos=2 * skipped, main_body=int(main_body),
        contact_cost_weight=float(base._contact_cost_weight),
        healthy_reward=float(base._healthy_reward),
        terminate_when_unhealthy=bool(base._terminate_when_unhealthy),
        healthy_z_range=(float(low_z), float(high_z)),
        contact_force_range=(float(low_f), float(high_f)),
        include_cfrc_ext=bool(base._include_cfrc_ext_in_observation))


def _refuse(env_id: str) -> NoReturn:
    raise UsageError(f"MuJoCo Warp pass 1 supports {', '.join(SUPPORTED)}, not {env_id!r}; "
                     "run that env with the default backend.")


@dataclass
class Physics:
    """What Gymnasium's reward, observation and termination read from MjData, for N worlds
    (first axis), in float64."""

    qpos: np.ndarray  # (N, nq)
    qvel: np.ndarray  # (N, nv)
    xpos: np.ndarray  # (N, nbody, 3), as mj_step leaves it (the last substep's start)
    cfrc_ext: np.ndarray  # (N, nbody, 6), from rnePostConstraint after the last substep

    @classmethod
    def of(cls, data: Any) -> Physics:
        """One world's quantities from a CPU ``mujoco.MjData`` (copies, as a batch of one)."""
        return cls(data.qpos[None].copy(), data.qvel[None].copy(), data.xpos[None].copy(),
                   data.cfrc_ext[None].copy())

    @classmethod
    def stack(cls, rows: list[Physics]) -> Physics:
        """Batches of worlds, one after the other."""
        return cls(*(np.concatenate([getattr(r, f) for r in rows])
                     for f in ("qpos", "qvel", "xpos", "cfrc_ext")))


def _contact_forces(terms: Terms, physics: Physics) -> np.ndarray:
    low, high = terms.contact_force_range
    return np.clip(physics.cfrc_ext, low, high)


def observe(terms: Terms, physics: Physics) -> np.ndarray:
    """The observations of N worlds, (N, obs_dim) float64, as the env's ``_get_obs``."""
    parts = [physics.qpos[:, terms.skipped_qpos:], physics.qvel]
    if terms.include_cfrc_ext:
        forces = _contact_forces(terms, physics)[:, 1:]  # the world body (0) is left out
        parts.append(forces.reshape(len(forces), -1))
    return np.concatenate(parts, axis=1)


def healthy(terms: Terms, physics: Physics) -> np.ndarray:
    """(N,) bool: Ant's ``is_healthy`` (every state entry finite, torso z in range); True for
    an env with no such rule."""
    if terms.healthy_z_range is None:
        return np.ones(len(physics.qpos), dtype=bool)
    low, high = terms.healthy_z_range
    finite = np.isfinite(physics.qpos).all(axis=1) & np.isfinite(physics.qvel).all(axis=1)
    z = physics.qpos[:, 2]
    return finite & (low <= z) & (z <= high)


def score(terms: Terms, before: Physics, after: Physics,
          actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rewards (N,) float64, terminated (N,) bool) of one step from ``before`` to ``after``
    under ``actions``, term by term as Gymnasium's ``step`` and ``_get_rew`` add them (the
    same operations in the same order, so Gymnasium's quantities give its values exactly)."""
    if terms.main_body is None:
        x_velocity = (after.qpos[:, 0] - before.qpos[:, 0]) / terms.dt
        forward = terms.forward_reward_weight * x_velocity
    else:
        xy_velocity = ((after.xpos[:, terms.main_body, :2] - before.xpos[:, terms.main_body, :2])
                       / terms.dt)
        forward = xy_velocity[:, 0] * terms.forward_reward_weight
    # the action as given (its dtype too): Gymnasium charges the unclipped action
    ctrl_cost = terms.ctrl_cost_weight * np.sum(np.square(actions), axis=1)
    is_healthy = healthy(terms, after)
    if terms.healthy_z_range is None:
        rewards = forward - ctrl_cost
    else:
        # the contact forces as one contiguous row per world: summed as Gymnasium sums the
        # (nbody, 6) array, so the rounding is the same
        forces = _contact_forces(terms, after)
        contact_cost = terms.contact_cost_weight * np.sum(
            np.square(forces.reshape(len(forces), -1)), axis=1)
        rewards = (forward + is_healthy * terms.healthy_reward) - (ctrl_cost + contact_cost)
    terminated = ~is_healthy & terms.terminate_when_unhealthy
    return np.asarray(rewards, dtype=np.float64), terminated


def missing_extra(option: str) -> str:
    """The sentence that refuses ``option`` where the mjwarp extra is not installed."""
    return (f"{option} needs MuJoCo Warp, which is not installed; "
            "pip install 'rolltape[mjwarp]'.")


def require_extra(option: str) -> None:
    """Refuse ``option`` in one sentence where the mjwarp extra is not installed, without
    importing it (Warp and MuJoCo Warp load MuJoCo and GL: an orchestrator may ask)."""
    from importlib.util import find_spec

    if find_spec("mujoco_warp") is None or find_spec("warp") is None:
        raise UsageError(missing_extra(option))


def quiet_warp() -> Any:
    """Warp, initialized, saying warnings and errors only (else a line per kernel module it
    loads, hundreds of them). A machine without a GPU is not worth a warning at start."""
    import warp as wp

    wp.config.log_level = wp.LOG_ERROR
    wp.init()
    wp.config.log_level = wp.LOG_WARNING
    return wp


def warp_device(recorded: str | None) -> str:
    """The Warp device to re-simulate a tape made on ``recorded`` ("cpu", "cuda:0"): that
    one when this machine has it (worlds on one device step the same whatever their number),
    else the CPU."""
    wp = quiet_warp()
    return recorded if recorded in {str(d) for d in wp.get_devices()} else "cpu"


def time_limit(spec: dict[str, Any]) -> int:
    """The steps an episode of the env ``spec`` (a run's or tape's env) may last: its own
    ``max_episode_steps``, else the registered env's."""
    steps = spec.get("max_episode_steps") or gymnasium.spec(spec["id"]).max_episode_steps
    if not steps:
        raise UsageError(f"{spec['id']} has no time limit; give --max-episode-steps.")
    return int(steps)


def reset_state(host: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) that the Gymnasium env ``host`` draws on ``reset(seed=seed)``: its own
    reset distribution, whatever its kwargs (reset_noise_scale included)."""
    host.reset(seed=seed)
    data = host.unwrapped.data
    return data.qpos.copy(), data.qvel.copy()



class MJWarpEnv:
    """``num_worlds`` copies of a Gymnasium MuJoCo env stepped together on MuJoCo Warp.

    The worlds have no autoreset and no time limit (``max_episode_steps`` is the host's, for
    the facts read from it): :func:`play` keeps count of which world has finished.
    ``device`` is Warp's (``"cpu"``, ``"cuda:0"``); None: Warp's default.
    """

    def __init__(self, env_id: str, num_worlds: int, *, device: str | None = None,
                 max_episode_steps: int | None = None, **kwargs: Any) -> None:
        if env_id not in SUPPORTED:
            _refuse(env_id)
        if num_worlds < 1:
            raise UsageError(f"num_worlds must be at least 1, not {num_worlds}.")
        import mujoco_warp as mjwarp  # the optional extra: imported only when it is used
        import warp as wp

        quiet_warp()
        self._wp, self._mjwarp = wp, mjwarp
        # the host: Gymnasium's own env, the one definition of model, terms and reset noise
        self.env_id, self.kwargs = env_id, dict(kwargs)
        # (its time limit too, so that the facts read from it are the run's), built as every
        # env of a run is: kwargs it does not take are one sentence
        self.host = make_env(env_spec(env_id, kwargs, max_episode_steps))
        base: Any = self.host.unwrapped  # a MujocoEnv: its model and frame_skip
        self.terms = terms_of(self.host)
        self.num_worlds = num_worlds
        self.frame_skip = int(base.frame_skip)
        mjm = base.model
        self.action_dim = int(mjm.nu)
        self._device = wp.get_device(device)
        self.device = str(self._device)
        with wp.ScopedDevice(self._device):
            self.model = mjwarp.put_model(mjm)
            self.data = mjwarp.make_data(mjm, nworld=num_worlds)
        self._physics: Physics | None = None

    @classmethod
    def of(cls, spec: dict[str, Any], num_worlds: int, device: str | None = None) -> MJWarpEnv:
        """The worlds of the env a run or tape names (``{"id", "kwargs", ...}``, its kwargs
        as :func:`rolltape.envs.ids.encode_kwargs` keeps them)."""
        from rolltape.envs.ids import decode_kwargs

        return cls(spec["id"], num_worlds, device=device,
                   max_episode_steps=spec.get("max_episode_steps"),
                   **decode_kwargs(dict(spec.get("kwargs") or {})))

    @property
    def current(self) -> Physics:
        """The worlds' quantities after the last reset or step (float64 copies)."""
        if self._physics is None:
            raise UsageError("MJWarpEnv has no state before reset; call reset(seeds) first.")
        return self._physics

    def physics(self) -> Physics:
        """The worlds' quantities now, copied from the device, as float64."""
        d = self.data
        return Physics(d.qpos.numpy().astype(np.float64), d.qvel.numpy().astype(np.float64),
                       d.xpos.numpy().astype(np.float64),
                       d.cfrc_ext.numpy().astype(np.float64))

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """Every world to a state (N, nq) and (N, nv), as after Gymnasium's reset: the rest of
        the data reset (time, controls, warm start, ``cfrc_ext``), positions computed.
        Returns the observations."""
        wp, mjwarp = self._wp, self._mjwarp
        n = self.num_worlds
        if qpos.shape != (n, self.model.nq) or qvel.shape != (n, self.model.nv):
            raise UsageError(f"set_state needs qpos {(n, self.model.nq)} and qvel "
                             f"{(n, self.model.nv)}, not {qpos.shape} and {qvel.shape}.")
        with wp.ScopedDevice(self._device):
            mjwarp.reset_data(self.model, self.data)
            self.data.qpos.assign(qpos.astype(np.float32))
            self.data.qvel.assign(qvel.astype(np.float32))
            mjwarp.forward(self.model, self.data)
            self.data.cfrc_ext.zero_()  # as mj_resetData leaves it: forward does not fill it
        self._physics = self.physics()
        return observe(self.terms, self._physics)

    def reset(self, seeds: Iterable[int]) -> np.ndarray:
        """World i reset as Gymnasium's env is on ``reset(seed=seeds[i])``; the observations."""
        seeds = [int(s) for s in seeds]
        if len(seeds) != self.num_worlds:
            raise UsageError(f"reset needs one seed per world ({self.num_worlds}), not "
                             f"{len(seeds)}.")
        states = [reset_state(self.host, s) for s in seeds]
        return self.set_state(np.stack([q for q, _ in states]), np.stack([v for _, v in states]))

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One env step of every world: ``frame_skip`` physics steps under ``actions``
        (N, nu). Returns (observations, rewards, terminated)."""
        wp, mjwarp = self._wp, self._mjwarp
        if self._physics is None:
            raise UsageError("MJWarpEnv.step was called before reset; call reset(seeds) first.")
        if actions.shape != (self.num_worlds, self.action_dim):
            raise UsageError(f"actions must be ({self.num_worlds}, {self.action_dim}), "
                             f"not {actions.shape}.")
        before = self._physics
        with wp.ScopedDevice(self._device):
            # ctrl as Gymnasium sets it; the model's ctrlrange clamps inside the physics
            self.data.ctrl.assign(actions.astype(np.float32))
            for _ in range(self.frame_skip):
                mjwarp.step(self.model, self.data)
            if self.terms.include_cfrc_ext or self.terms.contact_cost_weight:
                mjwarp.rne_postconstraint(self.model, self.data)
        after = self._physics = self.physics()
        rewards, terminated = score(self.terms, before, after, actions)
        return observe(self.terms, after), rewards, terminated

    def close(self) -> None:
        """Closes the host env (the device arrays go with this object)."""
        self.host.close()
