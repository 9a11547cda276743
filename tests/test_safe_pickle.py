"""rolltape.safe_pickle: what a VecNormalize file or a checkpoint's pickled entry may name.
Real pickles (SB3's VecNormalize.save, spaces, policy classes, ReLU) load; anything that
would call code is refused in one sentence, and the payload never runs."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rolltape.errors import UsageError
from rolltape.safe_pickle import POLICY_CLASS, POLICY_KWARGS, SPACES, VECNORMALIZE, loads


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_what_sb3_writes_is_read() -> None:
    import cloudpickle
    import torch
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    venv.reset()
    venv.step(np.zeros((1, 1), np.float32))
    state = loads(pickle.dumps(venv.__getstate__() | {"x": np.float32(1)}), "x", VECNORMALIZE)
    assert np.array_equal(state["obs_rms"].mean, venv.obs_rms.mean)
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Discrete(3)})
    space.seed(1)
    assert loads(cloudpickle.dumps(space), "x", kinds=SPACES) == space
    assert loads(cloudpickle.dumps(ActorCriticPolicy), "x", kinds=POLICY_CLASS) \
        is ActorCriticPolicy
    kwargs = {"activation_fn": torch.nn.ReLU, "optimizer_class": torch.optim.Adam,
              "net_arch": {"pi": [8], "vf": [8]}}
    assert loads(cloudpickle.dumps(kwargs), "x", kinds=POLICY_KWARGS) == kwargs


@pytest.mark.parametrize("make, kinds", [
    (lambda m: pickle.dumps(Payload(m)), SPACES),
    (lambda m: pickle.dumps([1, Payload(m)], protocol=0), POLICY_KWARGS),
    # Module prefixes admitted only for what they must hold: gymnasium.spaces.utils has
    # functions, stable_baselines3.common.utils the schedule helpers.
    (lambda m: b"cgymnasium.spaces.utils\nflatten\n.", SPACES),
    (lambda m: b"cstable_baselines3.common.utils\nget_schedule_fn\n.", POLICY_CLASS),
    (lambda m: b"cbuiltins\neval\n(S'1'\ntR.", POLICY_KWARGS),
    (lambda m: b"(Pfoo\nt.", SPACES),  # a persistent id
    (lambda m: pickle.dumps(np.arange(3))[:20], SPACES),  # truncated
])
def test_code_is_refused_in_one_sentence(tmp_path: Path, make, kinds) -> None:
    marker = tmp_path / "MARKER"
    with pytest.raises(UsageError) as err:
        loads(make(marker), "File 'x'", kinds=kinds)
    assert str(err.value).startswith("File 'x'") and "\n" not in str(err.value)
    assert not marker.exists()
