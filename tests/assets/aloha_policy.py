"""A fixed-action policy for the ALOHA suite (tests/suites/test_aloha.py): the left arm held at
gym-aloha's start pose, the right arm lowered onto the table, where it touches the cube on
some seeds (a reward of 1 or 2), both grippers open.

It refuses an observation not given under LeRobot's policy keys (its episode then fails),
so a run whose episodes all finish shows that the policy read ``observation.images.top``
(480 x 640 x 3 uint8), ``observation.state`` (14 joints) and ``task`` (the task's name), as
lerobot-eval gives them to a LeRobot policy.
"""

from __future__ import annotations

import numpy as np

ACTION = np.array([0, -0.96, 1.16, 0, -0.3, 0, 1.0,  # left arm: start pose, gripper open
                   0, 0.0, 0.8, 0, 0, 0, 1.0], np.float32)  # right arm: down to the table
KEYS = {"observation.images.top": ((480, 640, 3), np.uint8),
        "observation.state": ((14,), np.float64), "task": ((), np.str_)}


def reach(obs):
    """The fixed action, once the observation is checked to be LeRobot's."""
    got = {k: (np.asarray(v).shape, np.asarray(v).dtype.type) for k, v in obs.items()}
    if got != KEYS or obs["task"] != "transfer_cube":
        raise ValueError(f"not LeRobot's observation keys: {got}")
    return ACTION.copy()
