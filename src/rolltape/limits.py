"""The largest counts and sizes a run may ask for, checked before any work.

Each cap is far above any real use and below where something fails late: a count that
overflows a C integer (``len(range(2**70))``), a seed Gymnasium's server cannot carry
(seeds are uint64), a time limit a resumable run fails by ``MemoryError`` many episodes
in, or a folder name the file system refuses once the run's staging folder is made.

May import: errors and the standard library only (checked by eval, render and suites).

>>> check_run_counts(episodes=10, seed=2**64 - 10)
>>> check_run_counts(episodes=11, seed=2**64 - 10)
Traceback (most recent call last):
rolltape.errors.UsageError: --seed 18446744073709551606 with --episodes 11 needs seeds up...
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from rolltape.errors import UsageError

MAX_EPISODES = 10**15  # a billion episodes a second would take 30 years
MAX_SEED = 2**64 - 1  # Gymnasium's seeds: numpy takes more, the served protocol does not
MAX_EPISODE_STEPS = 10**7  # a tape holds every step in memory (~1 GB for MuJoCo at this)
MAX_FPS = 1000.0  # beyond this no player shows the frames (GIF stops at 100)
MAX_NAME_BYTES = 200  # file systems allow 255; staging adds '.NAME.partial' and suffixes
MAX_FRAME_STACK = 1024  # Atari stacks 4; a stack of 10**6 frames allocated gigabytes per step
# Until's looks: one per --batch up to --max-episodes, each kept in memory and in until.json
MAX_LOOKS = 100_000
MAX_RETURN_BOUND = 1e150  # (HI-LO)**2 stays finite in float64: -1e308,1e308 overflowed to NaN


def check_run_counts(*, episodes: int, seed: int, max_episode_steps: int | None = None
                     ) -> None:
    """Refuse ``--episodes``, ``--seed`` and ``--max-episode-steps`` above their caps."""
    if episodes > MAX_EPISODES:
        raise UsageError(f"--episodes {episodes} is more than a run can play; give at most "
                         f"{MAX_EPISODES:.0e} (split the work into several runs).")
    last = seed + episodes - 1
    if last > MAX_SEED:
        raise UsageError(f"--seed {seed} with --episodes {episodes} needs seeds up to {last}, "
                         f"but Gymnasium seeds must fit in 64 bits (at most {MAX_SEED}); give "
                         "a smaller --seed or fewer --episodes.")
    if max_episode_steps is not None and max_episode_steps > MAX_EPISODE_STEPS:
        raise UsageError(f"--max-episode-steps {max_episode_steps} is more than a tape holds "
                         f"(every step is kept in memory); give at most {MAX_EPISODE_STEPS:,}.")


def check_fps(fps: float | None) -> None:
    """Refuse a frame rate above :data:`MAX_FPS` (the range check below it is the caller's)."""
    if fps is not None and fps > MAX_FPS:
        raise UsageError(f"--fps {fps:g} is faster than any player shows; give at most "
                         f"{MAX_FPS:g} frames per second.")


def check_gpus(flag: str, gpus: float) -> None:
    """A GPU share per task: 0 (none) or more, finite."""
    if not (gpus >= 0 and math.isfinite(gpus)):
        raise UsageError(f"{flag} must be 0 (no GPU) or more GPUs per task, got {gpus}.")


def check_folder_name(flag: str, path: str | os.PathLike[str]) -> None:
    """Refuse a path with a part too long for a folder name once rolltape stages it
    (``File name too long`` would come after the work began, leaving staging behind).

    >>> check_folder_name("--out", "runs/" + "x" * 300)
    Traceback (most recent call last):
    rolltape.errors.UsageError: --out 'xxx...x…' has a name of 300 bytes; give one of at...
    """
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > MAX_NAME_BYTES:
            shown = part if len(part) <= 100 else part[:99] + "…"
            raise UsageError(f"{flag} '{shown}' has a name of {size} bytes; give one of at most "
                             f"{MAX_NAME_BYTES} (file systems allow 255, and rolltape adds to "
                             "it while it writes).")


MAX_FRAME_SIDE = 8192  # pixels: an 8K frame; MuJoCo's offscreen buffer at 100000 asked 149 GiB


def check_frame_size(width: int | None, height: int | None) -> None:
    """Refuse a frame side below 1 or above :data:`MAX_FRAME_SIDE` pixels before anything
    draws (a GL backend would try to allocate it first).

    >>> check_frame_size(640, None)
    >>> check_frame_size(100000, 100)
    Traceback (most recent call last):
    rolltape.errors.UsageError: --width 100000 is larger than a frame can be; give 1 to 8192 pixels.
    """
    for flag, side in (("--width", width), ("--height", height)):
        if side is not None and not 1 <= side <= MAX_FRAME_SIDE:
            what = "is larger than a frame can be" if side > MAX_FRAME_SIDE else \
                "must be at least 1"
            raise UsageError(f"{flag} {side} {what}; give 1 to {MAX_FRAME_SIDE} pixels.")
