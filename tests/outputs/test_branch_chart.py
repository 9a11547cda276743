"""The branch picture: a real PNG with the curve, its band and the point drawn."""

from __future__ import annotations

import numpy as np
from PIL import Image

from rolltape.outputs.branch_chart import draw_branch_chart, summary_line


def _record(success: bool | None) -> dict:
    points = [{"t": t, "n": 8, "p": p, "lo": max(0.0, p - 0.2), "hi": min(1.0, p + 0.2),
               "recorded": 10.0 - t} for t, p in zip(range(0, 20, 2), [0.9] * 5 + [0.0] * 5)]
    return {"points": points, "band": "Wilson 95%", "threshold": 0.5,
            "success_rule": None if success is None else "at_end",
            "point_of_no_return": 10 if success is False else None,
            "estimate": "P(success | state at t)", "branches": 8,
            "episode": {"tape": "tapes/policy-0001.npz", "seed": 1, "success": success,
                        "return": 12.0, "length": 20}}


def test_the_chart_is_a_png_that_shows_the_drop(tmp_path):
    path = draw_branch_chart(_record(False), tmp_path / "branch.png")
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert image.shape[0] > 200 and image.shape[1] > 500
    red = (image[..., 0] > 180) & (image[..., 1] < 60) & (image[..., 2] < 60)
    assert red.sum() > 100  # the point of no return's line
    blue = (image[..., 2] > 120) & (image[..., 0] < 40)
    assert blue.sum() > 200  # the curve
    # An env without success: the expected return, against the recorded one.
    path = draw_branch_chart(_record(None), tmp_path / "returns.png")
    assert Image.open(path).size == Image.open(tmp_path / "branch.png").size


def test_the_summary_line_names_the_point():
    record = {"episode": {"tape": "tapes/policy-0001.npz", "success": True},
              "success_rule": "at_end", "point_of_safety": None, "crossing": None,
              "grid": [0], "branches": 4, "replays_source": True}
    assert summary_line(record) == ("tapes/policy-0001.npz (succeeded): point of safety not "
                                    "reached; 1 grid steps x 4 branches; replays the tape bit "
                                    "for bit: yes")
