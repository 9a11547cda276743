"""The bundled demo policy: a small PPO + VecNormalize checkpoint trained by scripts/train_demo.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rolltape.errors import UsageError

DEMO_DIR = Path(__file__).resolve().parent

# Pusher's default camera is far away: the object and the goal are ~20 px in a 480 px
# frame. This one looks over the arm at the table so the push is plain to see. Only the
# picture depends on it; it is stored with the tapes like any env kwarg.
DEMO_ENV_KWARGS = {"default_camera_config": {"trackbodyid": -1, "distance": 1.8,
                                             "elevation": -55.0, "azimuth": 120.0,
                                             "lookat": [0.3, -0.3, 0.0]}}


def demo_assets() -> dict[str, Any]:
    """Paths of the bundled checkpoint and statistics, with what ``demo.json`` says of them."""
    info_path = DEMO_DIR / "demo.json"
    policy, stats = DEMO_DIR / "policy.zip", DEMO_DIR / "vecnormalize.pkl"
    if not (info_path.is_file() and policy.is_file() and stats.is_file()):
        raise UsageError(f"The demo policy is missing from '{DEMO_DIR}'; retrain it with "
                         "`python scripts/train_demo.py`.")
    info = json.loads(info_path.read_text())
    return {**info, "policy": str(policy), "vecnormalize": str(stats),
            "env_kwargs": DEMO_ENV_KWARGS}
