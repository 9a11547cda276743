"""The shell of an env whose simulator lives in a benchmark's own venv (Meta-World, ALOHA).

Such an env module is imported on both sides. In rolltape's own environment, which cannot
hold the benchmark, the env is a shell: its spaces only (a served session is checked against
them), and it refuses to step. In the benchmark's venv it holds the benchmark's env
(``_env``) and every reset, step and render goes there. :class:`VenvEnv` is that one rule.

May import: gymnasium. Never: a benchmark (its env module imports it, inside the env).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym


class VenvEnv(gym.Env):
    """Base of an env that steps only in its benchmark's venv: ``_env`` is the benchmark's
    env there and None in a shell, and :meth:`_sim` gives it or refuses in one sentence."""

    what: ClassVar[str]  # how the refusal names the env: "A Meta-World env"
    benchmark: ClassVar[str]  # the name `rolltape suites install` takes
    _env: Any = None

    def _sim(self) -> Any:
        """The benchmark's env; a shell (built outside the benchmark's venv) refuses."""
        if self._env is None:
            raise RuntimeError(f"{self.what} steps only in its own venv (`rolltape suites "
                               f"install {self.benchmark}`); rolltape serves it from there.")
        return self._env

    def close(self) -> None:
        """Close the benchmark's env, if this is not a shell."""
        if self._env is not None:
            self._env.close()
