"""diff.html's videos (rolltape.compare.diff_videos): when there are none, and a video that
cannot be made is said on the page with nothing left beside it. The rendered pair itself is
checked in tests/compare/test_diff.py, on a real diff."""

from __future__ import annotations

from pathlib import Path

from rolltape.compare.diff_videos import render_first


def test_no_divergence_or_a_dataset_side_makes_no_video(tmp_path: Path) -> None:
    page = tmp_path / "diff.html"
    assert render_first({"first": None, "first_tapes": None}, page) is None
    first = {"label": "policy episode 0", "divergence": {"step": 3}}
    assert render_first({"first": first, "first_tapes": ["a.npz", None]}, page) is None
    assert list(tmp_path.iterdir()) == []


def test_a_video_that_cannot_be_made_is_said_and_leaves_nothing(tmp_path: Path) -> None:
    page = tmp_path / "diff.html"
    first = {"label": "policy episode 0", "divergence": {"step": 3}}
    shown = render_first({"first": first, "first_tapes": [str(tmp_path / "gone-a.npz"),
                                                          str(tmp_path / "gone-b.npz")]}, page)
    assert shown is not None and shown["problem"] and "gone-a.npz" in shown["problem"]
    assert shown["sides"] == [] and list(tmp_path.iterdir()) == []
