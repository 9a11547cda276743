"""rolltape.suites.shell: an env whose simulator lives in its benchmark's venv is, here, a
shell that refuses to step in one sentence naming the install command."""

from __future__ import annotations

from typing import Any

import pytest

from rolltape.suites.aloha import AlohaEnv
from rolltape.suites.metaworld import MetaWorldEnv
from rolltape.suites.shell import VenvEnv


@pytest.mark.parametrize(("make", "sentence"), [
    (lambda: AlohaEnv("insertion"), r"An ALOHA env steps only in its own venv \(`rolltape "
                                    r"suites install aloha`\)"),
    (lambda: MetaWorldEnv("reach-v3"), r"A Meta-World env steps only in its own venv "
                                       r"\(`rolltape suites install metaworld`\)"),
])
def test_a_shell_has_its_spaces_and_refuses_to_step(make: Any, sentence: str) -> None:
    env = make()  # rolltape's own environment holds neither gym_aloha nor metaworld
    assert env.action_space.shape is not None
    with pytest.raises(RuntimeError, match=sentence):
        env.reset(seed=0)
    env.close()  # a shell has nothing to close


def test_the_benchmark_s_env_is_what_steps_and_closes() -> None:
    class Inner:
        closed = False

        def close(self) -> None:
            self.closed = True

    class Env(VenvEnv):
        what, benchmark = "A test env", "test"

    env, inner = Env(), Inner()
    env._env = inner
    assert env._sim() is inner
    env.close()
    assert inner.closed
