"""Pass 2 compares the digests of a pixel observation's images only when it draws with
the GL backend pass 1 drew them with (:class:`rolltape.pass2.replay.ImagesApart`); else
it compares the other keys (rewards and flags as always) and says so."""

from __future__ import annotations

import dataclasses

import pytest
from tests.assets.pixel_toy import PixelToy

from conftest import Server
from rolltape import RenderRequest, Tape, evaluate, render
from rolltape.envs.digests import array_digest

PIXEL = "tests.assets.pixel_toy:PixelToy-v0"


@pytest.fixture(scope="module")
def tape_of_egl(tmp_path_factory):
    """One real pass 1 episode of the pixel toy served by a `rolltape serve` whose process
    draws with MUJOCO_GL=egl (what a hosted suite's server does): its path and tape."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MUJOCO_GL", "egl")
        mp.setenv("PYOPENGL_PLATFORM", "egl")
        server = Server(what=(PIXEL,))
    try:
        out = tmp_path_factory.mktemp("egl") / "run"
        run = evaluate(f"{server.address}/{PIXEL}", "random", episodes=1, seed=3, out=out,
                       report=False)
    finally:
        server.stop()
    path = str(run.tape_path(run.results.episodes[0]))
    return path, Tape.load(path)


def _tampered(tape: Tape, path, key: str, frame: int) -> str:
    """The tape with ``key``'s digest at ``frame`` altered (and the whole digest with it)."""
    assert tape.obs_keys is not None and tape.obs_key_digest is not None
    by_key, whole = tape.obs_key_digest.copy(), tape.obs_digest.copy()
    by_key[frame, tape.obs_keys.index(key)] ^= 1
    whole[frame] ^= 1
    dataclasses.replace(tape, obs_key_digest=by_key, obs_digest=whole).save(path)
    return str(path)


def test_images_drawn_with_another_backend_are_left_out(tape_of_egl, tmp_path, monkeypatch):
    path, tape = tape_of_egl
    assert tape.obs_images == {"keys": ["pixels/top"], "backend": "egl"}
    assert tape.obs_keys == ("agent_pos", "pixels/top")
    # osmesa's pixels differ from egl's: the whole observation's digest cannot match
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    obs, _ = PixelToy().reset(seed=3)
    assert array_digest(obs["pixels"]["top"]) != int(tape.obs_key_digest[0, 1])
    assert array_digest(obs["agent_pos"]) == int(tape.obs_key_digest[0, 0])
    [result] = render([RenderRequest(path, env_id=PIXEL)], backends="osmesa")
    assert result.verified, result.divergence
    assert result.checked == ("observations except images (pass 1 drew them with egl, "
                              "pass 2 with osmesa)")
    # the keys that are compared still are: a wrong agent_pos at frame 3 is step 2's
    bad = _tampered(tape, tmp_path / "pos.npz", "agent_pos", 3)
    [wrong] = render([RenderRequest(bad, env_id=PIXEL)], backends="osmesa")
    assert not wrong.verified and wrong.divergence is not None
    assert (wrong.divergence.step, wrong.divergence.field) == (2, "observation")
    # an image's digest is not: the tint of another backend is no divergence
    pixels = _tampered(tape, tmp_path / "pixels.npz", "pixels/top", 3)
    [shifted] = render([RenderRequest(pixels, env_id=PIXEL)], backends="osmesa")
    assert shifted.verified


def test_the_same_backend_compares_every_key(tape_of_egl, tmp_path):
    path, tape = tape_of_egl
    [result] = render([RenderRequest(path, env_id=PIXEL)], backends="egl")
    assert result.verified and result.checked == "observations"
    bad = _tampered(tape, tmp_path / "pixels.npz", "pixels/top", 3)
    [wrong] = render([RenderRequest(bad, env_id=PIXEL)], backends="egl")
    assert not wrong.verified and wrong.divergence is not None
    assert (wrong.divergence.step, wrong.divergence.field) == (2, "observation")
