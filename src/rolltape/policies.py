"""Policies: what chooses the actions in pass 1.

A policy source is a string, as on the command line:

- ``random``: the action space's own sampler, seeded with each episode's seed;
- ``metaworld-expert``: Meta-World's scripted policy of the task played, run in the
  benchmark's venv (:mod:`rolltape.suites.metaworld_expert`; the ``metaworld_*`` suites);
- ``sb3:PATH.zip`` (or just ``PATH.zip``): a Stable-Baselines3 checkpoint of any algorithm,
  with optional VecNormalize statistics applied exactly as SB3 applies them at evaluation
  (``training=False``, ``norm_reward=False``);
- ``MODULE:ATTR`` or ``path/to/file.py:ATTR``: a Python callable ``obs -> action``, an object
  with an SB3-style ``predict``, or a zero-argument factory returning either;
- ``tape:PATH.npz``: open-loop replay of a recorded tape's actions;
- ``ws://HOST:PORT``: a policy served by ``rolltape serve-policy`` or any server of openpi's
  websocket protocol (:mod:`rolltape.policy_server`), its action chunks executed open loop.

Only :func:`load_policy` imports a policy framework, and only in the process that calls it
(the pass-1 worker): the orchestrator and the render workers never import torch.

May import: tape, files, errors; torch and SB3 lazily. Never: the render side, executors,
outputs (pass 1 only).

Example (not run: it loads a checkpoint):
    >>> policy = load_policy("sb3:ppo.zip", env, vecnormalize="vecnormalize.pkl")
    >>> policy.reset(seed=1000)
    >>> action = policy.act(obs)
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import json
import sys
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rolltape.errors import UsageError
from rolltape.files import sha256_of

SB3_ALGOS = ("PPO", "A2C", "SAC", "TD3", "DDPG", "DQN")


class Policy:
    """The interface pass 1 uses: ``reset(seed)`` at each episode start, then ``act(obs)``.

    ``description`` is stored in every tape: what produced its actions.
    """

    description: dict[str, Any]

    def reset(self, seed: int | None) -> None:
        """Called before each episode with that episode's reset seed."""

    def act(self, obs: Any) -> Any:
        raise UsageError(f"{type(self).__name__} does not choose actions.")

    def fork(self) -> Policy | None:
        """A policy for another episode played at the same time as this one's, acting
        exactly as this one would on that episode alone; None when episodes must be
        played one at a time (state kept across steps that another episode would share,
        such as a global random generator)."""
        return None

    def chunk(self, obs: Any) -> np.ndarray:
        """This policy's answer to ``obs`` as a chunk of actions, ``[H, *action_shape]``
        (the simulated clock, :mod:`rolltape.pass1.clock`, asks for these); a policy that
        gives one action per call answers a chunk of one."""
        return np.asarray(self.act(obs))[None]

    def chunk_starts(self) -> np.ndarray | None:
        """The steps of this episode at which a chunk of actions was requested, when some
        chunk ran more than one action (stored in the tape); None otherwise."""
        return None

    def tape_fields(self) -> dict[str, np.ndarray]:
        """Further per-step arrays this episode's tape records (the clock's schedule)."""
        return {}


def seed_generators(seed: int, *action_spaces: Any) -> None:
    """Seed every generator a policy may draw from with an episode's seed: Python's
    ``random``, numpy's global generator, torch's (when torch is loaded: a policy that
    uses it has loaded it) and the given action spaces' own.

    >>> seed_generators(7); a = np.random.rand()
    >>> seed_generators(7); a == np.random.rand()
    True
    """
    import random

    random.seed(seed)
    # numpy's legacy seed takes 32 bits; an episode seed may hold 64 (Gymnasium's).
    np.random.seed(seed if seed < 2**32 else [seed & 0xFFFFFFFF, seed >> 32])
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    for space in {id(s): s for s in action_spaces if s is not None}.values():
        space.seed(seed)


class RandomPolicy(Policy):
    """Uniform samples from the action space, reseeded per episode so any episode replays alone."""

    def __init__(self, action_space: Any) -> None:
        self.action_space = action_space
        self.description = {"kind": "random", "source": "random", "deterministic": False}

    def reset(self, seed: int | None) -> None:
        self.action_space.seed(seed)

    def act(self, obs: Any) -> Any:
        return self.action_space.sample()

    def fork(self) -> RandomPolicy:
        forked = RandomPolicy(copy.deepcopy(self.action_space))  # a generator of its own
        forked.description = self.description
        return forked


class MetaWorldExpertPolicy(Policy):
    """Meta-World's scripted policy of the task the env plays (``metaworld-expert``), run in
    the benchmark's venv (:mod:`rolltape.suites.metaworld_expert`); stateless and deterministic."""

    def __init__(self, env: Any) -> None:
        from rolltape.suites.metaworld_expert import SOURCE, ExpertProcess

        self.process = ExpertProcess(env)
        self.description = {"kind": "metaworld-expert", "source": SOURCE, "deterministic": True}

    def act(self, obs: Any) -> Any:
        return self.process.act(obs)

    def fork(self) -> MetaWorldExpertPolicy:
        return self  # stateless, and its calls come one at a time

    def close(self) -> None:
        self.process.close()


class SB3Policy(Policy):
    """A Stable-Baselines3 model, with VecNormalize observation statistics when given.

    ``act`` takes a lean path when one gives bitwise the actions of ``model.predict`` (checked
    on load): the same network and ops without predict's per-call checks and conversions,
    which cost more than a MuJoCo step. Otherwise it calls ``predict``.
    """

    def __init__(self, model: Any, obs_normalizer: Any | None, deterministic: bool,
                 description: dict[str, Any]) -> None:
        self.model = model
        self.obs_normalizer = obs_normalizer
        self.deterministic = deterministic
        self.description = description
        self._lean = _lean_actor(model, obs_normalizer, deterministic)
        self.description["inference"] = "lean" if self._lean else "predict"

    def reset(self, seed: int | None) -> None:
        # Sampled actions draw from torch's global generator (PPO, SAC, ...), DQN's
        # epsilon-greedy from numpy's (np.random.rand) and the model's action space: seed
        # them all per episode, so that a sampled episode replays alone, whichever worker
        # plays it and whatever it played before.
        if not self.deterministic and seed is not None:
            seed_generators(seed, self.model.action_space, self.model.policy.action_space)

    def fork(self) -> SB3Policy | None:
        # Deterministic actions keep no state between steps: one instance acts for all.
        return self if self.deterministic else None

    def predict_action(self, obs: Any) -> Any:
        """Exactly SB3's evaluation path: VecNormalize.normalize_obs, then model.predict."""
        return _sb3_predict(self.model, self.obs_normalizer, self.deterministic, obs)

    def act(self, obs: Any) -> Any:
        return self._lean(obs) if self._lean is not None else self.predict_action(obs)


def _sb3_predict(model: Any, normalizer: Any | None, deterministic: bool, obs: Any) -> Any:
    if normalizer is not None:
        obs = normalizer.normalize_obs(obs)
    action, _ = model.predict(obs, deterministic=deterministic)
    return action


def _lean_actor(model: Any, normalizer: Any | None, deterministic: bool
                ) -> Callable[[Any], Any] | None:
    """A faster ``obs -> action`` equal bit for bit to predict, or None when none is known.

    Covers flat Box observations with deterministic actions: ActorCriticPolicy (PPO, A2C)
    with Gaussian or categorical heads, and any policy's own ``_predict`` otherwise.
    """
    import torch
    from gymnasium import spaces

    policy = model.policy
    obs_space, act_space = policy.observation_space, policy.action_space
    if not deterministic or not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        return None
    if getattr(policy, "normalize_images", False) and len(obs_space.shape) == 3:
        return None
    policy.set_training_mode(False)
    norm = None
    if normalizer is not None:
        if not normalizer.norm_obs:
            norm = None
        else:
            rms = normalizer.obs_rms
            std = np.sqrt(rms.var + normalizer.epsilon)
            mean, clip = rms.mean, normalizer.clip_obs
            norm = lambda o: np.clip((o - mean) / std, -clip, clip).astype(np.float32)  # noqa: E731
    from stable_baselines3.common.distributions import (
        CategoricalDistribution,
        DiagGaussianDistribution,
    )
    from stable_baselines3.common.policies import ActorCriticPolicy, BaseModel

    is_box = isinstance(act_space, spaces.Box)
    squash = bool(getattr(policy, "squash_output", False))
    low, high = (act_space.low, act_space.high) if is_box else (None, None)
    if isinstance(policy, ActorCriticPolicy) and isinstance(
            policy.action_dist, (DiagGaussianDistribution, CategoricalDistribution)) and not squash:
        gaussian = isinstance(policy.action_dist, DiagGaussianDistribution)

        def forward(x: Any) -> Any:
            # BaseModel's: the actor's features alone (ActorCriticPolicy's answers a pair
            # when the actor and the critic do not share an extractor).
            features = BaseModel.extract_features(policy, x, policy.pi_features_extractor)
            out = policy.action_net(policy.mlp_extractor.forward_actor(features))
            return out if gaussian else torch.argmax(out, dim=1)
    else:
        def forward(x: Any) -> Any:
            return policy._predict(x, deterministic=True)

    shape = (-1, *act_space.shape) if is_box else (-1,)

    def act(obs: Any) -> Any:
        o = norm(obs) if norm is not None else obs
        with torch.no_grad():
            x = torch.as_tensor(o, device=policy.device).float().reshape(1, -1)
            a = forward(x).cpu().numpy().reshape(shape)
        if is_box:
            a = policy.unscale_action(a) if squash else np.clip(a, low, high)
        return a.squeeze(axis=0)

    # Trust it only if it agrees with predict, bit for bit, on varied observations.
    rng = np.random.default_rng(0)
    probe = rng.standard_normal((64, *obs_space.shape)) * rng.choice([0.1, 1.0, 10.0], (64, 1))
    probe = probe.astype(obs_space.dtype)
    try:
        for obs in probe:
            expected = _sb3_predict(model, normalizer, True, obs)
            got = act(obs)
            if got.dtype != expected.dtype or not np.array_equal(got, expected):
                return None
    except Exception:
        return None
    return act


class CallablePolicy(Policy):
    """A user function ``obs -> action`` or an object with SB3-style ``predict``."""

    def __init__(self, fn: Callable[[Any], Any], description: dict[str, Any],
                 owner: Any = None) -> None:
        self.fn = fn
        self.description = description
        self.owner = owner  # the object the source named (its spaces, action_horizon)

    def reset(self, seed: int | None) -> None:
        # A callable may sample from the global generators: seed them per episode, as for
        # SB3, so that its episodes replay alone too.
        if seed is not None:
            seed_generators(seed)

    @property
    def action_horizon(self) -> int | None:
        """H, when the object the source named acts in chunks (``action_horizon`` > 1)."""
        h = getattr(self.owner, "action_horizon", None)
        return h if type(h) is int and h > 1 else None

    def act(self, obs: Any) -> Any:
        return self.fn(obs)

    def chunk(self, obs: Any) -> np.ndarray:
        if self.action_horizon is None:
            return super().chunk(obs)
        return np.asarray(self.fn(obs))


class TapePolicy(Policy):
    """Open-loop replay: the actions of a recorded tape, in order, whatever the observation."""

    def __init__(self, actions: np.ndarray, description: dict[str, Any]) -> None:
        self.actions = actions
        self.description = description
        self._t = 0

    def reset(self, seed: int | None) -> None:
        self._t = 0

    def act(self, obs: Any) -> Any:
        if self._t >= len(self.actions):
            raise UsageError(
                f"The tape policy ran out of actions after {len(self.actions)} steps; "
                "replay it with the tape's own seed and env, or use --max-episode-steps."
            )
        action = self.actions[self._t]
        self._t += 1
        return action


def is_sb3_source(source: str) -> bool:
    """True when ``--policy`` names an SB3 checkpoint (``sb3:PATH`` or a ``.zip``)."""
    return source.startswith("sb3:") or source.endswith(".zip")


def load_policy(
    source: str,
    env: Any,
    *,
    vecnormalize: str | Path | None = None,
    algo: str | None = None,
    deterministic: bool = True,
    device: str = "cpu",
) -> Policy:
    """Build the policy a source string names, checked against ``env``'s spaces (``env``
    None: unchecked, as ``serve-policy`` loads a policy, with no env beside it)."""
    if source.startswith("ws://"):
        if vecnormalize is not None:
            raise UsageError("--vecnormalize applies to a local SB3 checkpoint; give it to "
                             "`rolltape serve-policy`, which applies it beside the policy.")
        return ServedPolicy(source, env)
    if source == "random":
        if vecnormalize is not None:
            raise UsageError("--vecnormalize applies to SB3 checkpoints, not to the random policy.")
        return RandomPolicy(env.action_space)
    if source == "metaworld-expert":  # Meta-World's scripted policy, in its own venv
        return MetaWorldExpertPolicy(env)
    if source.startswith("tape:"):
        from rolltape.tape import Tape

        tape = Tape.load(source[len("tape:"):])
        desc = {"kind": "tape", "source": source[len("tape:"):],
                "sha256": sha256_of(source[len("tape:"):]), "deterministic": True}
        return TapePolicy(tape.actions, desc)
    if is_sb3_source(source):
        path = Path(source[len("sb3:"):] if source.startswith("sb3:") else source)
        return _load_sb3(path, env, vecnormalize, algo, deterministic, device)
    if ":" in source:
        if vecnormalize is not None:
            raise UsageError("--vecnormalize applies to SB3 checkpoints, not to Python callables.")
        return _load_callable(source, deterministic)
    raise UsageError(
        f"Policy '{source}' is not understood; use 'random', 'sb3:PATH.zip', "
        "'MODULE:ATTR', 'FILE.py:ATTR' or 'tape:PATH.npz'."
    )


def detect_sb3_algo(path: Path) -> str:
    """Read the algorithm from a checkpoint's saved attributes (no unpickling)."""
    return _algo_of(_saved_data(path), path)


def _saved_data(path: Path) -> dict[str, Any]:
    """A checkpoint's saved attributes, as JSON (SB3's serialized objects left unread)."""
    try:
        with zipfile.ZipFile(path) as zf:
            data = json.loads(zf.read("data"))
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, OSError):
        data = None
    if not isinstance(data, dict):
        raise UsageError(
            f"Checkpoint '{path}' is not a readable Stable-Baselines3 .zip (corrupt or "
            "truncated); re-save it with model.save()."
        )
    return data


def _algo_of(data: dict[str, Any], path: Path) -> str:
    policy_module = str(data.get("policy_class", {}).get("__module__", ""))
    if ".td3." in policy_module:
        # DDPG is TD3 with one actor update per critic update and no target smoothing.
        ddpg = data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0
        return "DDPG" if ddpg else "TD3"
    for name in ("sac", "dqn"):
        if f".{name}." in policy_module:
            return name.upper()
    if "clip_range" in data or "n_epochs" in data:
        return "PPO"
    if "policy_class" in data and "gae_lambda" in data:
        return "A2C"
    raise UsageError(
        f"Cannot tell which algorithm saved '{path}'; pass --algo with one of {', '.join(SB3_ALGOS)}."
    )


def sb3_checkpoint(path: str | Path) -> Path:
    """The file an SB3 path names: as ``load`` does, ``ckpt`` may mean ``ckpt.zip``."""
    path = Path(path)
    if not path.is_file() and path.suffix != ".zip" and Path(f"{path}.zip").is_file():
        return Path(f"{path}.zip")
    return path


def _load_sb3(path: Path, env: Any, vecnormalize: str | Path | None, algo: str | None,
              deterministic: bool, device: str) -> SB3Policy:
    path = sb3_checkpoint(path)
    if not path.is_file():
        raise UsageError(f"Checkpoint '{path}' does not exist; give the path of an SB3 .zip.")
    data = _saved_data(path)
    algo = (algo or _algo_of(data, path)).upper()
    if algo not in SB3_ALGOS:
        raise UsageError(f"Unknown --algo '{algo}'; use one of {', '.join(SB3_ALGOS)}.")
    import stable_baselines3
    import torch

    # One thread: single-observation inference is latency-bound, and W workers share the cores.
    torch.set_num_threads(1)
    cls = getattr(stable_baselines3, algo)
    custom = _custom_objects(data, path)  # before SB3's loader, which would unpickle them
    try:
        model = cls.load(path, device=device, custom_objects=custom)
    except Exception as exc:  # SB3 raises many types for a bad file
        raise UsageError(
            f"Checkpoint '{path}' could not be loaded as {algo} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); check the file and --algo."
        ) from None
    if env is None:  # serve-policy: the checkpoint's own spaces stand for the env's
        from types import SimpleNamespace

        env = SimpleNamespace(observation_space=model.observation_space,
                              action_space=model.action_space,
                              spec=SimpleNamespace(id=f"{path.name}'s own spaces"))
    check_observation_shape(model.observation_space, env, path)
    check_action_space(model, algo, path, env)
    normalizer = None
    desc: dict[str, Any] = {
        "kind": "sb3", "algo": algo, "source": str(path), "sha256": sha256_of(path),
        "deterministic": deterministic, "sb3_version": stable_baselines3.__version__,
        "vecnormalize": None, "vecnormalize_sha256": None,
    }
    if vecnormalize is not None:
        normalizer = load_vecnormalize(Path(vecnormalize), env)
        desc["vecnormalize"] = str(vecnormalize)
        desc["vecnormalize_sha256"] = sha256_of(vecnormalize)
    return SB3Policy(model, normalizer, deterministic, desc)


class _NoOptimizer:
    """Stands in for a checkpoint's optimizer: an evaluation never trains, and building a
    torch optimizer imports ``torch._dynamo`` (its ``add_param_group`` is wrapped to keep
    dynamo out): PPO.load took 1.2 s with its Adam, 0.2 s without, on 2 cores, in every
    pass-1 worker. (SAC's entropy optimizer is built by SAC itself, so SAC still pays.)"""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        pass

    def load_state_dict(self, state: Any, strict: bool = True) -> None:
        pass  # the saved optimizer state only matters to training


# What a checkpoint's pickled entries become when the evaluation does not need them read:
# schedules as constants, training state as nothing (SB3 rebuilds what it must).
_STAND_INS: dict[str, Any] = {"learning_rate": 0.0, "clip_range": 0.2, "clip_range_vf": None,
                              "train_freq": 1, "target_entropy": 0.0}


def _custom_objects(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """SB3 ``custom_objects`` replacing every pickled entry of a checkpoint's saved ``data``,
    so that SB3's loader unpickles nothing (cloudpickle would call what the file names):
    the spaces, ``policy_class`` and ``policy_kwargs`` read as data (:mod:`rolltape.
    safe_pickle`), the optimizer left out (an evaluation never trains), schedules as
    constants, and the rest of the saved training state (last observations, episode
    buffers, buffer classes, action noise) as nothing."""
    import base64

    from stable_baselines3.common.utils import ConstantSchedule

    from rolltape.safe_pickle import POLICY_CLASS, POLICY_KWARGS, SPACES, loads

    kinds = {"observation_space": SPACES, "action_space": SPACES, "policy_class": POLICY_CLASS,
             "policy_kwargs": POLICY_KWARGS}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not (isinstance(value, dict) and ":serialized:" in value):
            continue
        if key in kinds:
            try:
                raw = base64.b64decode(str(value[":serialized:"]).encode(), validate=False)
            except ValueError:
                raw = b""
            out[key] = loads(raw, f"Checkpoint '{path}': its saved {key}", kinds=kinds[key])
        elif key == "lr_schedule":
            out[key] = ConstantSchedule(0.0)
        else:
            out[key] = _STAND_INS.get(key)
    if not isinstance(out.get("policy_class", data.get("policy_class")), (type, str, type(None))):
        raise UsageError(f"Checkpoint '{path}': its saved policy_class is not a class; re-save "
                         "it with model.save().")
    kwargs = out.get("policy_kwargs", data.get("policy_kwargs"))
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise UsageError(f"Checkpoint '{path}': its saved policy_kwargs are not a mapping; "
                             "re-save it with model.save().")
        # SB3 builds the policy's optimizer from these; an evaluation never steps it.
        out["policy_kwargs"] = {**kwargs, "optimizer_class": _NoOptimizer}
    return out


def check_observation_shape(theirs: Any, env: Any, path: Path) -> None:
    """Refuse, before any episode, observations the checkpoint cannot take; SB3 takes an image
    channel-last where it was trained channel-first (VecTransposeImage), as predict does. When
    SB3's Atari preprocessing and frame stacking would make them fit, say so."""
    want, got = tuple(theirs.shape or ()), tuple(env.observation_space.shape or ())
    if want == got or (len(want) == 3 and want == (got[2], got[0], got[1])
                       and np.dtype(theirs.dtype) == np.uint8):
        return
    image = len(got) == 3 and got[-1] in (1, 3, 4) and np.dtype(
        env.observation_space.dtype) == np.uint8
    stack = [n for n in (want[0], want[-1]) if len(want) == 3 and sorted(want) == sorted(
        (84, 84, n))]
    if image and stack:
        hint = "--wrapper atari" + (f" --frame-stack {stack[0]}" if stack[0] > 1 else "")
        fix = f"add {hint} (SB3's Atari preprocessing, as make_atari_env + VecFrameStack)"
    elif got and want and want[:-1] == got[:-1] and got[-1] and want[-1] % got[-1] == 0 \
            and want[-1] > got[-1]:
        fix = f"add --frame-stack {want[-1] // got[-1]} (as SB3's VecFrameStack)"
    else:
        fix = "use the env (and --wrapper) it was trained on"
    raise UsageError(f"Checkpoint '{path}' expects observations of shape {want} but env "
                     f"'{env.spec.id if env.spec else env}' gives {got} to the policy; {fix}.")


def check_action_space(model: Any, algo: str, path: Path, env: Any) -> None:
    """Refuse, before any episode, an env whose actions the checkpoint cannot produce: SB3
    would otherwise act anyway (a Box policy's floats fed to a Discrete env, or the reverse)."""
    theirs, ours = type(model.action_space).__name__, type(env.action_space).__name__
    if algo in ("SAC", "TD3", "DDPG") and ours != "Box":
        raise UsageError(f"--policy {path}: {algo} acts only in continuous (Box) action "
                         f"spaces, but env '{env.spec.id}' has a {ours} one; use a PPO, A2C or "
                         "DQN checkpoint.")
    # Discrete(4) and Discrete(6) share a shape, (): their sizes tell a Breakout checkpoint
    # from Pong's (and a MultiDiscrete's nvec likewise).
    if theirs != ours or getattr(model.action_space, "shape", None) != env.action_space.shape \
            or _sizes(model.action_space) != _sizes(env.action_space):
        raise UsageError(f"--policy {path}: the checkpoint acts in {model.action_space} but env "
                         f"'{env.spec.id}' takes {env.action_space}; use the env it was "
                         "trained on.")


def _sizes(space: Any) -> list[int] | None:
    """A discrete space's counts (Discrete's n and start, MultiDiscrete's nvec), else None."""
    for name in ("nvec", "n"):
        if hasattr(space, name):
            return np.asarray(getattr(space, name)).ravel().tolist() + \
                np.asarray(getattr(space, "start", 0)).ravel().tolist()
    return None


def load_vecnormalize(path: Path, env: Any) -> Any:
    """Read VecNormalize statistics as data (:mod:`rolltape.safe_pickle`: the file may name
    only what ``VecNormalize.save`` pickles) and freeze them as SB3 does for evaluation."""
    from rolltape.safe_pickle import VECNORMALIZE, loads

    if not path.is_file():
        raise UsageError(f"VecNormalize statistics '{path}' do not exist; give the .pkl saved "
                         "with VecNormalize.save().")
    stats = loads(path.read_bytes(), f"VecNormalize statistics '{path}'", VECNORMALIZE)
    from stable_baselines3.common.vec_env import VecNormalize

    # Its own __dict__, never getattr: a VecNormalize without its env looks a missing
    # attribute up in that env (None), and norm_obs=False saves no obs_rms (RecursionError).
    state = vars(stats) if isinstance(stats, VecNormalize) else {}
    if "norm_obs" not in state or (state["norm_obs"] and "obs_rms" not in state):
        raise UsageError(f"'{path}' holds a {type(stats).__name__}, not VecNormalize statistics.")
    stats_shape = getattr(state.get("observation_space"), "shape", None)
    if stats_shape != env.observation_space.shape:
        raise UsageError(
            f"VecNormalize statistics '{path}' are for observations of shape {stats_shape} but "
            f"env '{env.spec.id}' gives {env.observation_space.shape}; use the statistics saved "
            "with this checkpoint."
        )
    stats.training = False
    stats.norm_reward = False
    return stats


def _load_callable(source: str, deterministic: bool) -> CallablePolicy:
    target, _, attr = source.rpartition(":")
    if target.endswith(".py"):
        file = Path(target)
        if not file.is_file():
            raise UsageError(f"Policy file '{file}' does not exist.")
        spec = importlib.util.spec_from_file_location(f"rolltape_user_{file.stem}", file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        digest = sha256_of(file)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise UsageError(f"Cannot import policy module '{target}' ({exc}).") from None
        digest = None
    obj = getattr(module, attr, None)
    if obj is None:
        raise UsageError(f"'{target}' has no attribute '{attr}'.")
    if _is_factory(obj):
        obj = obj()
    desc = {"kind": "callable", "source": source, "sha256": digest, "deterministic": deterministic}
    if hasattr(obj, "predict"):
        predict = obj.predict
        takes_flag = "deterministic" in inspect.signature(predict).parameters
        if takes_flag:
            return CallablePolicy(lambda o: predict(o, deterministic=deterministic)[0], desc,
                                  obj)
        return CallablePolicy(lambda o: predict(o)[0], desc, obj)
    if callable(obj):
        return CallablePolicy(obj, desc, obj)
    raise UsageError(f"'{source}' is a {type(obj).__name__}, not a policy or a policy factory.")


def _is_factory(obj: Any) -> bool:
    """A class, or a function whose parameters all have defaults, builds the policy."""
    if inspect.isclass(obj):
        return True
    if not callable(obj) or hasattr(obj, "predict"):
        return False
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in params)



def close_policy(policy: Any) -> None:
    """Release what ``policy`` holds, when it holds something (a served policy's session,
    a process); a policy without ``close`` holds nothing."""
    close = getattr(policy, "close", None)
    if close is not None:
        close()

class ServedPolicy(Policy):
    """A policy on a ``ws://`` server (:mod:`rolltape.policy_server`, openpi's protocol).

    It asks for a chunk of actions when the last one is used up and executes its first K
    open loop (``--execute-steps`` K, else the server's ``execute_steps``, else the whole
    chunk), as openpi's ``ActionChunkBroker`` and LeRobot's ``n_action_steps`` do, and records
    the step at which each chunk was requested (the tape's ``chunk_starts``). The server's
    action space, when its metadata gives one, must be the env's: else it is refused before
    any episode, naming both. A request that fails (the server gone, slow, or answering an
    error) fails the episode with one sentence naming the server; the next episode opens a
    new session.

    :meth:`ask` sends the next observation before :meth:`act` needs its answer, so that a
    worker playing several episodes at once (:class:`rolltape.pass1.inflight.AskAhead`)
    steps the others while the server works; :meth:`fork` opens those episodes' sessions
    when the server says its sessions are independent.
    """

    def __init__(self, source: str, env: Any) -> None:
        from rolltape.policy_server import wire

        self.source = source
        self.address = wire.parse_source(source)
        self.env = env
        self.session: Any = self._connect()
        meta = self.session.metadata
        ours = meta.get(wire.ROLLTAPE_KEY)
        # rolltape's server resets a session's policy; an openpi server has no such message
        self._resets = isinstance(ours, dict) and ours.get("reset") is True
        # what one session asks does not change another's answers (an openpi server's
        # policy may draw from one generator for every connection: not said, so not taken)
        self.independent = isinstance(ours, dict) and ours.get("independent_sessions") is True
        # one forward pass for a batch of observations (act_batch): said by serve-policy
        self.batches = isinstance(ours, dict) and ours.get("batch") is True
        sessions = ours.get("max_sessions") if isinstance(ours, dict) else None
        self.max_sessions = sessions if type(sessions) is int and sessions >= 1 else 1
        served = meta.get("execute_steps")
        self.execute_steps = self.address.execute_steps or (
            served if type(served) is int and served >= 1 else None)
        self._shape: tuple[int, ...] | None = None
        if env is not None:
            self._shape = tuple(getattr(env.action_space, "shape", None) or ())
            self._check_space(meta.get("action_space"))
        served_policy = meta.get("policy") if isinstance(meta.get("policy"), dict) else {}
        self.description = {
            "kind": "served", "source": self.address.uri, "protocol": "openpi-websocket",
            "execute_steps": self.execute_steps,
            "action_horizon": meta.get("action_horizon"),
            "served": {k: v for k, v in served_policy.items() if k in (
                "kind", "source", "sha256", "algo", "deterministic", "vecnormalize_sha256")},
            "deterministic": served_policy.get("deterministic"),
        }
        self._queue: list[Any] = []
        self._starts: list[int] = []
        self._t = 0
        self._asked: Any = None  # the observation sent by ask() whose answer is unread

    def _connect(self) -> Any:
        from rolltape.policy_server.client import PolicySession

        return PolicySession(self.address)

    def _check_space(self, theirs: Any) -> None:
        from rolltape.policy_server.client import space_refusal

        if theirs is None or self.env is None:
            return  # an openpi server need not say; each chunk's shape is checked instead
        problem = space_refusal(self.address.uri, theirs, self.env)
        if problem:
            raise UsageError(problem)

    def reset(self, seed: int | None) -> None:
        from rolltape.policy_server import wire

        self._drop_asked()  # an episode that ended (or failed) before act took it
        if self.session is None:  # the last one failed half-way: a new session
            self.session = self._connect()
        self._queue, self._starts, self._t = [], [], 0
        if self._resets:
            self._call({wire.CONTROL: wire.RESET, "seed": seed}, "a reset")

    def _call(self, message: dict[str, Any], what: str) -> Any:
        if self.session is None:
            self.session = self._connect()
        return self._guarded(lambda: self.session.call(message, what))

    def _guarded(self, request: Callable[[], Any]) -> Any:
        from rolltape.policy_server.client import PolicyServerError

        try:
            return request()
        except PolicyServerError:
            self.session.close()
            self.session = None  # its state is unknown: the next episode opens another
            raise

    def _drop_asked(self) -> None:
        """Read and drop the answer to an :meth:`ask` that no :meth:`act` took."""
        from rolltape.policy_server.client import PolicyServerError

        if self._asked is None:
            return
        self._asked = None
        if self.session is None:
            return
        try:
            self._guarded(lambda: self.session.receive("an observation no step used"))
        except PolicyServerError:
            pass  # its session is closed: the next call opens another

    def ask(self, obs: Any) -> None:
        """Send ``obs`` now when the next :meth:`act` (on this very object) will need the
        server's answer (no action of the last chunk is left); :meth:`act` then only
        reads the answer. The answer is the one a plain call gets: the session answers
        its requests in order."""
        if self._queue or self._asked is not None:
            return
        if self.session is None:
            self.session = self._connect()
        what = f"the observation of step {self._t}"
        self._guarded(lambda: self.session.send({"observation": obs}, what))
        self._asked = obs

    def act(self, obs: Any) -> Any:
        if not self._queue:
            what = f"the observation of step {self._t}"
            if self._asked is not None and self._asked is obs:
                self._asked = None
                reply = self._guarded(lambda: self.session.receive(what))
            else:
                self._drop_asked()  # asked about another observation: not this one
                reply = self._call({"observation": obs}, what)
            chunk = self._chunk(reply)
            self._queue = list(chunk[:self.execute_steps or len(chunk)])
            self._starts.append(self._t)
        self._t += 1
        return self._queue.pop(0)

    def act_batch(self, obs: Any) -> np.ndarray:
        """One action per row of ``obs`` (an array, or a map of arrays, of B rows) from one
        forward pass on the server, for a server whose metadata says it batches."""
        from rolltape.policy_server.client import PolicyServerError

        if not self.batches:
            raise UsageError(f"The policy server at {self.address.uri} does not act on a "
                             "batch of observations (serve-policy does for a deterministic "
                             "SB3 policy); drop --batched-inference or --batch.")
        self._drop_asked()
        reply = self._call({"observations": obs}, "a batch of observations")
        actions = self._chunk(reply)  # [B, *action_shape]: checked as a chunk's rows are
        rows = len(next(iter(obs.values())) if isinstance(obs, dict) else obs)
        if len(actions) != rows:
            raise PolicyServerError(f"the policy server at {self.address.uri} answered "
                                    f"{len(actions)} actions for {rows} observations")
        return actions

    def chunk(self, obs: Any) -> np.ndarray:
        return self._chunk(self._call({"observation": obs}, "an observation"))

    def _chunk(self, reply: Any) -> np.ndarray:
        """The answer's actions, checked: an array of H >= 1 rows of the env's action shape."""
        from rolltape.policy_server.client import PolicyServerError

        actions = reply.get("actions") if isinstance(reply, dict) else None
        uri = self.address.uri
        if not isinstance(actions, np.ndarray) or actions.ndim < 1 or len(actions) < 1:
            raise PolicyServerError(f"the policy server at {uri} answered without an "
                                    "'actions' array of at least one row")
        if self._shape is not None and actions.shape[1:] != self._shape:
            raise PolicyServerError(f"the policy server at {uri} sent actions of shape "
                                    f"{list(actions.shape)}, not [H, "
                                    f"{', '.join(map(str, self._shape))}] for this env"
                                    .replace("[H, ]", "[H]"))
        return actions

    def chunk_starts(self) -> np.ndarray | None:
        if len(self._starts) == self._t:  # one call a step: nothing to record
            return None
        return np.asarray(self._starts, dtype=np.int64)

    def fork(self) -> ServedPolicy | None:
        # Another session, when the server says its sessions' answers do not depend on
        # each other's requests (a deterministic SB3 policy; not a sampling one, nor an
        # openpi server, which does not say); None also when the server has no room.
        from rolltape.policy_server.client import PolicyServerGone

        if not self.independent:
            return None
        try:
            return ServedPolicy(self.source, self.env)
        except PolicyServerGone:
            return None

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
