"""rolltape: evaluate RL policies with rendering off, record every episode as a tape, and
render the tapes in isolated processes, checking that each replay earns what pass 1 earned.

Nothing here imports torch or OpenGL: policies load in pass-1 workers, GL in render workers.

Example:
    >>> import rolltape
    >>> run = rolltape.evaluate("HalfCheetah-v5", "sb3:ppo.zip", vecnormalize="vn.pkl",
    ...                         episodes=30, baseline="random", video=1, out="runs/cheetah")
    >>> tape = rolltape.Tape.load(run.path / "tapes" / "policy-0000.npz")
"""

from .errors import DivergenceError, UsageError
from .evaluate import RunResult, evaluate
from .render import RenderRequest, RenderResult, render
from .tape import Tape

__version__ = "0.1.0"
__all__ = ["DivergenceError", "RenderRequest", "RenderResult", "RunResult", "Tape",
           "UsageError", "evaluate", "render", "__version__"]
