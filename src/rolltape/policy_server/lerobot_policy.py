"""``lerobot:PRETRAINED_DIR``: a LeRobot policy served as ``lerobot-eval`` runs it.

The policy, its saved pre- and post-processors and its input/output features are loaded with
LeRobot's own functions (``make_policy`` with the benchmark's LeRobot env config, as
``lerobot-eval`` does, and ``make_pre_post_processors`` from the same folder). Each call does
what ``lerobot-eval``'s rollout does for one step: the env's observation through the
benchmark's declared key mapping, LeRobot's ``preprocess_observation`` (tensors, a batch of
one, images to CHW floats in [0, 1]), the env and policy preprocessors, ``select_action``
(the policy's own action queue does the chunking, so each call returns one action) and the
postprocessor. A reset calls ``policy.reset()`` (and reseeds torch when given a seed).

Which mapping an observation gets is decided from its keys, each step. An observation that
already carries LeRobot's policy key names (a dict with an ``observation.*`` key: the
``aloha`` and Meta-World ``_pixels`` suites give ``observation.images.<cam>`` /
``observation.image``, ``observation.state``, ``task``) passes through: only the keys the
policy's input features name are kept, renamed back to the env keys LeRobot's wrappers give
(``pixels``, ``agent_pos``, ``environment_state``) and handed to LeRobot's own
``preprocess_observation``, so images get exactly its conversion (HWC uint8 -> a batch of
CHW float32 / 255); the observation's ``task`` text is lerobot-eval's ``observation["task"]``.
Any other observation goes through the mapping declared for its benchmark (PushT: which env
keys become which LeRobot env keys and, for gym-pusht's flat ``obs_type="state"`` vector,
which slices). A policy input the observation lacks, or gives in another shape, is refused in
one sentence naming both (a :class:`~rolltape.errors.UsageError`).

Runs in LeRobot's environment: lerobot and torch are imported only when such a source loads.

May import: numpy, errors, and (lazily) lerobot, torch. Never: gymnasium's simulators,
pass 1, pass 2.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rolltape.errors import UsageError

PREFIX = "lerobot:"


@dataclass(frozen=True)
class ObservationMap:
    """How one benchmark's env observation becomes LeRobot's env observation."""

    lerobot_env: str  # the LeRobot env config type (``lerobot.envs.configs``) make_policy is given
    keys: dict[str, str]  # env dict key -> LeRobot env key (what preprocess_observation reads)
    vector: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> [start, stop)
    hints: dict[str, str] = field(default_factory=dict)  # key -> how to make the env give it


# LeRobot's PushT wrapper feeds {"pixels": HxWx3 uint8, "agent_pos": (2,)} (obs_type
# pixels_agent_pos) or {"environment_state": (16,), "agent_pos": (2,)}; gym-pusht's "state"
# observation (rolltape's pusht suite) is [agent x, agent y, block x, block y, block angle].
MAPS: dict[str, ObservationMap] = {
    "pusht": ObservationMap(
        lerobot_env="pusht",
        keys={"agent_pos": "agent_pos", "environment_state": "environment_state",
              "pixels": "pixels"},
        vector={"agent_pos": (0, 2)},
        hints={"agent_pos": "give the env's observation as gym-pusht does",
               "environment_state": "make the env with gym-pusht's "
                                    "obs_type='environment_state_agent_pos', as LeRobot does",
               "pixels": "make the env with gym-pusht's obs_type='pixels_agent_pos', as "
                         "LeRobot does"}),
}

# LeRobot env configs (besides a benchmark's own) a policy can be served for: the suites that
# give LeRobot's keys (rolltape.suites.aloha, the Meta-World _pixels suites)
LEROBOT_ENVS = ("aloha", "metaworld")

# LeRobot env key -> the policy input feature preprocess_observation makes of it
FEATURE_OF = {"agent_pos": "observation.state", "environment_state": "observation.environment_state",
              "pixels": "observation.image"}


def map_observation(obs: Any, mapping: ObservationMap, needs: dict[str, tuple[int, ...]]
                    ) -> dict[str, np.ndarray]:
    """LeRobot's env observation (before ``preprocess_observation``) from the env's, checked
    against the policy's input features ``needs`` (feature -> shape).

    >>> m = MAPS["pusht"]
    >>> sorted(map_observation(np.arange(5.0), m, {"observation.state": (2,)}))
    ['agent_pos']
    >>> map_observation(np.arange(5.0), m, {"observation.environment_state": (16,)})
    Traceback (most recent call last):
    ...
    rolltape.errors.UsageError: the LeRobot policy needs 'observation.environment_state' (shape [16]), which comes from the env's 'environment_state', and the pusht observation has none (it has: agent_pos); make the env with gym-pusht's obs_type='environment_state_agent_pos', as LeRobot does.
    >>> frame = {"pixels": np.zeros((96, 96, 3), np.uint8), "agent_pos": np.zeros(2)}
    >>> map_observation(frame, m, {"observation.image": (3, 96, 96)})["pixels"].shape
    (96, 96, 3)
    >>> map_observation(frame, m, {"observation.image": (3, 384, 384)})
    Traceback (most recent call last):
    ...
    rolltape.errors.UsageError: the LeRobot policy needs 'observation.image' of shape [384, 384, 3] from the env's 'pixels', which has shape [96, 96, 3]; make the env with gym-pusht's obs_type='pixels_agent_pos', as LeRobot does.
    """
    out: dict[str, np.ndarray] = {}
    if isinstance(obs, dict):
        for theirs, ours in mapping.keys.items():
            if theirs in obs:
                out[ours] = np.asarray(obs[theirs])
    else:
        flat = np.asarray(obs)
        for ours, (start, stop) in mapping.vector.items():
            if flat.ndim == 1 and flat.shape[0] >= stop:
                out[ours] = flat[start:stop]
    for feature, shape in needs.items():
        key = next((k for k, f in FEATURE_OF.items() if f == feature), None)
        if key is None:
            raise UsageError(f"the LeRobot policy needs '{feature}', which the "
                             f"{mapping.lerobot_env} mapping does not provide (it maps "
                             f"{', '.join(sorted(FEATURE_OF.values()))}).")
        if key not in out:
            raise UsageError(f"the LeRobot policy needs '{feature}' (shape {list(shape)}), which "
                             f"comes from the env's '{key}', and the {mapping.lerobot_env} "
                             f"observation has none (it has: {', '.join(sorted(out)) or 'nothing'}"
                             f"); {mapping.hints.get(key, 'map it')}.")
        got = out[key].shape
        # images travel HxWxC (as the env renders them); LeRobot's feature says CxHxW
        want = (shape[1], shape[2], shape[0]) if key == "pixels" and len(shape) == 3 else shape
        if tuple(got) != tuple(want):
            raise UsageError(f"the LeRobot policy needs '{feature}' of shape {list(want)} from "
                             f"the env's '{key}', which has shape {list(got)}; {mapping.hints.get(key, 'map it')}.")
    return out


# LeRobot policy key -> the env key its wrappers give, which preprocess_observation reads
# (observation.images.<cam> -> pixels[<cam>]; any other observation.<x> -> <x>)
ENV_KEY_OF = {feature: key for key, feature in FEATURE_OF.items()}


def is_lerobot_named(obs: Any) -> bool:
    """Whether ``obs`` already carries LeRobot's policy key names (and so passes through).

    >>> is_lerobot_named({"observation.state": [0.0], "task": "t"}), is_lerobot_named({"agent_pos": [0.0]})
    (True, False)
    """
    return isinstance(obs, dict) and any(str(k).startswith("observation.") for k in obs)


def pass_through(obs: dict[str, Any], needs: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """LeRobot's env observation (before ``preprocess_observation``) from an observation under
    LeRobot's policy keys: the keys the policy's features ``needs`` name, checked and renamed
    back to the env keys ``preprocess_observation`` turns into them.

    >>> frame = {"observation.images.top": np.zeros((48, 64, 3), np.uint8),
    ...          "observation.state": np.zeros(14), "task": "insertion", "observation.extra": 0}
    >>> env = pass_through(frame, {"observation.images.top": (3, 48, 64), "observation.state": (14,)})
    >>> sorted(env), env["pixels"]["top"].shape
    (['agent_pos', 'pixels'], (48, 64, 3))
    >>> pixels = {"observation.image": np.zeros((48, 48, 3), np.uint8), "observation.state":
    ...           np.zeros(4), "observation.environment_state": np.zeros(39), "task": "reach"}
    >>> {k: v.shape for k, v in pass_through(pixels, {"observation.image": (3, 48, 48),
    ...                                               "observation.state": (4,)}).items()}
    {'pixels': (48, 48, 3), 'agent_pos': (4,)}
    >>> pass_through(frame, {"observation.images.top": (3, 480, 640)})
    Traceback (most recent call last):
    ...
    rolltape.errors.UsageError: the LeRobot policy needs 'observation.images.top' of shape [480, 640, 3] (its feature [3, 480, 640], channels first), and the observation's has shape [48, 64, 3]; give the env the policy's resolution (the suite's width and height).
    >>> pass_through(frame, {"observation.image": (3, 48, 64)})
    Traceback (most recent call last):
    ...
    rolltape.errors.UsageError: the LeRobot policy needs 'observation.image' (shape [3, 48, 64]), which the observation lacks (it has: observation.extra, observation.images.top, observation.state, task); serve this policy to a suite or env that gives that key.
    """
    out: dict[str, Any] = {}
    for feature, shape in needs.items():
        if feature not in obs:
            raise UsageError(f"the LeRobot policy needs '{feature}' (shape {list(shape)}), which "
                             f"the observation lacks (it has: {', '.join(sorted(map(str, obs)))}); "
                             "serve this policy to a suite or env that gives that key.")
        value = np.asarray(obs[feature])
        image = feature == "observation.image" or feature.startswith("observation.images.")
        # images travel HxWxC uint8 (as the env draws them); LeRobot's feature says CxHxW
        want = (shape[1], shape[2], shape[0]) if image and len(shape) == 3 else tuple(shape)
        if tuple(value.shape) != want:
            layout = f" (its feature {list(shape)}, channels first)" if image else ""
            fix = ("give the env the policy's resolution (the suite's width and height)" if image
                   else "serve this policy to the benchmark it was trained on")
            raise UsageError(f"the LeRobot policy needs '{feature}' of shape {list(want)}{layout}, "
                             f"and the observation's has shape {list(value.shape)}; {fix}.")
        if feature.startswith("observation.images."):
            out.setdefault("pixels", {})[feature[len("observation.images."):]] = value
        else:
            out[ENV_KEY_OF.get(feature, feature[len("observation."):])] = value
    return out


class LeRobotPolicy:
    """One session's LeRobot policy: ``act(obs)`` gives one action, ``reset(seed)``."""

    def __init__(self, policy: Any, preprocessor: Any, postprocessor: Any,
                 env_pre: Any, env_post: Any, mapping: ObservationMap, source: str) -> None:
        self.policy, self.pre, self.post = policy, preprocessor, postprocessor
        self.env_pre, self.env_post, self.mapping = env_pre, env_post, mapping
        cfg = policy.config
        self.needs = {k: tuple(f.shape) for k, f in cfg.input_features.items()}
        self.action_shape = tuple(cfg.output_features["action"].shape)
        self.description: dict[str, Any] = {
            "source": source, "kind": "lerobot", "type": cfg.type,
            "n_action_steps": getattr(cfg, "n_action_steps", None),
            "inputs": ", ".join(f"{k}{list(s)}" for k, s in self.needs.items()),
            "action_shape": str(list(self.action_shape))}

    def fork(self) -> LeRobotPolicy:
        """Another session's policy: its own copy (its own action queue)."""
        return LeRobotPolicy(copy.deepcopy(self.policy), self.pre, self.post, self.env_pre,
                             self.env_post, self.mapping, self.description["source"])

    def reset(self, seed: int | None) -> None:
        import torch

        self.policy.reset()  # empties the action queue, as lerobot-eval's rollout does
        if seed is not None:  # a sampling policy (Diffusion) draws the same per seed
            torch.manual_seed(seed)

    def act(self, obs: Any) -> np.ndarray:
        """One lerobot-eval step: map, preprocess, select_action, postprocess."""
        import torch
        from lerobot.envs.utils import preprocess_observation

        if is_lerobot_named(obs):  # the observation is LeRobot's already (aloha, Meta-World)
            env_obs = pass_through(obs, self.needs)
            task = str(obs.get("task", ""))  # lerobot-eval's env.call("task_description"/"task")
        else:
            env_obs, task = map_observation(obs, self.mapping, self.needs), ""
        observation: dict[str, Any] = preprocess_observation(env_obs)
        observation["task"] = [task]  # lerobot-eval's default is "" when the env names no task
        observation = self.pre(self.env_pre(observation))
        with torch.inference_mode():
            action = self.policy.select_action(observation)
        action = self.env_post({"action": self.post(action)})["action"]
        return np.asarray(action.to("cpu").numpy()[0], dtype=np.float32)


def load_lerobot(source: str, benchmark: str = "pusht", device: str = "cpu") -> LeRobotPolicy:
    """The policy, processors and features of a ``lerobot:PRETRAINED_DIR`` source, loaded as
    ``lerobot-eval`` loads them (its ``make_policy`` and ``make_pre_post_processors``)."""
    folder = Path(source[len(PREFIX):]).expanduser()
    if not (folder / "config.json").is_file():
        raise UsageError(f"'{source}' is not a LeRobot pretrained folder (no config.json in "
                         f"{folder}); give the folder save_pretrained wrote, e.g. "
                         "outputs/train/RUN/checkpoints/last/pretrained_model.")
    mapping = MAPS.get(benchmark)
    if mapping is None:
        raise UsageError(f"no LeRobot observation mapping for '{benchmark}'; known: "
                         f"{', '.join(sorted(MAPS))}.")
    try:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.envs.configs import EnvConfig
        from lerobot.envs.factory import make_env_pre_post_processors
        from lerobot.policies.factory import make_policy, make_pre_post_processors
    except ImportError as exc:
        raise UsageError(f"'{source}' needs LeRobot ({exc}); run the server in LeRobot's "
                         "environment (python -m rolltape.serve_policy).") from None
    from lerobot.envs.utils import env_to_policy_features

    cfg = PreTrainedConfig.from_pretrained(str(folder))
    cfg.pretrained_path = folder
    cfg.device = device
    # make_policy takes the policy's action feature from the env config: the benchmark's,
    # or else the first LeRobot env config whose action has the saved policy's shape (an
    # ALOHA or Meta-World policy served to the suites that give LeRobot's keys)
    saved = cfg.output_features.get("action")
    env_cfg = None
    for name in (mapping.lerobot_env, *LEROBOT_ENVS):
        candidate = EnvConfig.get_choice_class(name)()
        if saved is None or (tuple(env_to_policy_features(candidate)["action"].shape)
                              == tuple(saved.shape)):
            env_cfg = candidate
            break
    if env_cfg is None:
        raise UsageError(f"'{source}' acts with shape {list(saved.shape)}, which none of "
                         f"LeRobot's {', '.join((mapping.lerobot_env, *LEROBOT_ENVS))} env "
                         "configs does; serve a policy for one of those benchmarks.")
    policy = make_policy(cfg=cfg, env_cfg=env_cfg)
    policy.eval()
    pre, post = make_pre_post_processors(
        policy_cfg=cfg, pretrained_path=str(folder),
        preprocessor_overrides={"device_processor": {"device": str(policy.config.device)}})
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=cfg)
    return LeRobotPolicy(policy, pre, post, env_pre, env_post, mapping, source)
