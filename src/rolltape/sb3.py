"""``rolltape.sb3``: rolltape inside a Stable-Baselines3 training run, importable as users
import SB3's own callbacks (``from rolltape.sb3 import TapeCallback``). The code lives in
:mod:`rolltape.training.sb3`; this module only names it.

May import: training.sb3 (and so SB3 and torch). Never: imported by ``import rolltape``
(the package face loads it on first use of ``rolltape.sb3``).
"""

from __future__ import annotations

from rolltape.training.sb3 import TapeCallback, every, make_recorded_vec_env

__all__ = ["TapeCallback", "every", "make_recorded_vec_env"]
