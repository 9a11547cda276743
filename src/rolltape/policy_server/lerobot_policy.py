"""``lerobot:PRETRAINED_DIR``: a LeRobot policy served as ``lerobot-eval`` runs it.

The policy, its saved pre- and post-processors and its input/output features are loaded with
LeRobot's own functions (``make_policy`` with the benchmark's LeRobot env config, as
``lerobot-eval`` does, and ``make_pre_post_processors`` from the same folder). Each call does
what ``lerobot-eval``'s rollout does for one step: the env's observation through the
benchmark's declared key mapping, LeRobot's ``preprocess_observation`` (tensors, a batch of
one, images to CHW floats in [0, 1]), the env and policy preprocessors, ``select_action``
(the policy's own action queue does the chunking, so each call returns one action) and the
postprocessor. A reset calls ``policy.reset()`` (and reseeds torch when given a seed).

The mapping is declared per benchmark (PushT first): which env observation keys become which
LeRobot env keys (LeRobot's own wrapper names: ``agent_pos``, ``environment_state``,
``pixels``), and, for a flat vector observation (gym-pusht's ``obs_type="state"``), which
slices of it are which key. A policy input the mapped observation lacks, or gives in another
shape, is refused in one sentence (a :class:`~rolltape.errors.UsageError`).

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

        observation: dict[str, Any] = preprocess_observation(
            map_observation(obs, self.mapping, self.needs))
        observation["task"] = [""]  # lerobot-eval's default when the env names no task
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
    cfg = PreTrainedConfig.from_pretrained(str(folder))
    cfg.pretrained_path = folder
    cfg.device = device
    env_cfg = EnvConfig.get_choice_class(mapping.lerobot_env)()
    policy = make_policy(cfg=cfg, env_cfg=env_cfg)
    policy.eval()
    pre, post = make_pre_post_processors(
        policy_cfg=cfg, pretrained_path=str(folder),
        preprocessor_overrides={"device_processor": {"device": str(policy.config.device)}})
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=cfg)
    return LeRobotPolicy(policy, pre, post, env_pre, env_post, mapping, source)
