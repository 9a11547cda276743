"""Make docs/quality.png: one HalfCheetah frame at each --quality preset, side by side.

    .venv/bin/python scripts/quality_still.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import rolltape
from rolltape.pass2.encode import read_frames
from rolltape.pass2.replay import QUALITY

OUT = Path(__file__).resolve().parent.parent / "docs" / "quality.png"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = rolltape.evaluate("HalfCheetah-v5", "random", episodes=1, seed=3,
                                max_episode_steps=60, out=Path(tmp) / "run", report=False)
        tape = run.path / "tapes" / "policy-0000.npz"
        tiles = []
        for preset in QUALITY:
            start = time.perf_counter()
            rolltape.render([rolltape.RenderRequest(str(tape), (f"{tmp}/{preset}/",),
                                                    quality=preset, width=640, height=480)])
            seconds = time.perf_counter() - start
            frame = list(read_frames(f"{tmp}/{preset}"))[40]
            image = Image.fromarray(frame)
            draw = ImageDraw.Draw(image)
            font = ImageFont.load_default(size=22)
            draw.rectangle((0, 0, 640, 34), fill=(0, 0, 0))
            draw.text((10, 5), f"--quality {preset}  ({61 / seconds:.0f} frames/s incl. start-up)",
                      fill=(255, 255, 255), font=font)
            tiles.append(np.asarray(image))
    Image.fromarray(np.concatenate(tiles, axis=1)).save(OUT, optimize=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
