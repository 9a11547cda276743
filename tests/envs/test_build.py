"""Building the env a spec describes (rolltape.envs.build): kwargs it refuses, a video of an
env that cannot draw rgb_array frames, and a size for one that draws at its own are each
refused in one sentence naming what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolltape.envs.build import make_env
from rolltape.envs.ids import env_spec
from rolltape.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.assets.toy_envs"


def test_rejected_kwargs_name_the_flag_to_check() -> None:
    with pytest.raises(UsageError, match=r"^Env 'CartPole-v1' cannot be built with kwargs "
                                         r"\{'no_such_kwarg': 1\} .*fix them \(--env-kwargs"):
        make_env(env_spec("CartPole-v1", {"no_such_kwarg": 1}))


def test_an_env_without_rgb_array_cannot_make_a_video(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(UsageError, match="cannot render 'rgb_array' frames.*drop --video"):
        make_env(env_spec(f"{TOY}:NoRender-v0"), render_mode="rgb_array")


def test_a_size_for_an_env_that_draws_at_its_own_is_refused() -> None:
    with pytest.raises(UsageError, match="^Env 'CartPole-v1' draws its frames at its own size"):
        make_env(env_spec("CartPole-v1"), render_mode="rgb_array", width=64)
