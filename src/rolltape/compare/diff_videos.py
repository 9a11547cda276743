"""diff.html's videos: the first diverging episode of a ``rolltape diff``, from each run's
tape, side by side, with the step where they part marked on both.

Each tape is replayed by pass 2 (``rolltape.render``, resim: every step is checked against
pass 1, so a video is what that run's episode really was) with the step overlay on, into
``<page>-A.mp4`` and ``<page>-B.mp4`` beside the page; the page starts both at the
divergence step (a media fragment, ``#t=``) and says where it is. A video that cannot be
made is said on the page, never a refusal: the diff itself is already done.

May import: rendering, pass2.request (the request), errors.
Never: policies, pass 1, torch.

Example (not run: it renders):
    >>> videos = render_first(report, Path("diff.html"))
    >>> [s["verified"] for s in videos["sides"]]
    [True, True]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rolltape.errors import UsageError


def render_first(report: dict[str, Any], page: Path) -> dict[str, Any] | None:
    """Render the two tapes of ``report``'s first diverging episode next to ``page``;
    returns what the page shows of them (None: no episode parts, or a side is a dataset,
    which has no tape to replay)."""
    from rolltape.pass2.request import RenderRequest
    from rolltape.rendering import render

    first, tapes = report.get("first"), report.get("first_tapes")
    if first is None or not tapes or None in tapes:
        return None
    d = first.get("divergence")
    step = d["step"] if d else None  # None: they part at the reset (or are counted apart)
    outs = [page.with_name(f"{page.stem}-{side}.mp4") for side in "AB"]
    requests = [RenderRequest(tape=str(tape), outputs=(str(out),), mode="resim",
                              overlay=True, overwrite=True)  # the step number on each frame
                for tape, out in zip(tapes, outs)]
    shown: dict[str, Any] = {"label": first["label"], "step": step, "sides": [],
                             "problem": None}
    try:
        made = render(requests, workers=2)
    except UsageError as exc:
        for out in outs:  # no half-made video stays beside the page
            for path in (out, Path(f"{out}.metadata.json")):
                path.unlink(missing_ok=True)
        shown["problem"] = str(exc)
        return shown
    fps = next((r.fps for r in made if r is not None and r.fps), 0.0)
    shown["t"] = round(step / fps, 3) if step is not None and fps else 0.0
    for side, out, result in zip("AB", outs, made):
        assert result is not None  # render raises for a video it could not make
        shown["sides"].append({
            "side": side, "src": out.name, "verified": bool(result.verified),
            "frames": result.frames, "tape": str(result.tape),
            "divergence": result.divergence.describe() if result.divergence else None})
    return shown
