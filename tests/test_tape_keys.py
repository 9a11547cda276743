"""Per-key observation digests and the reset observation's forms in a tape: made from a
dict observation by pass 1's fields, saved and read back bit for bit, and refused with one
sentence when they disagree with the tape."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from rolltape.errors import UsageError
from rolltape.pass1.fields import kept_obs, reset_forms, tape_fields
from rolltape.tape import Tape


def _obs(t: int) -> dict[str, np.ndarray]:
    pixels = np.zeros((4, 4, 3), np.uint8)
    pixels[t % 4, 0] = 255
    return {"pixels": pixels, "state": np.array([0.5, 0.25])}  # state never changes


def _tape() -> Tape:
    steps = [(np.array([0.1, 0.2], np.float32), 1.0, False, t == 4, kept_obs(_obs(t + 1)))
             for t in range(5)]
    fields = tape_fields(3, None, kept_obs(_obs(0)), steps, (None, None, None), None, None, 0.0)
    fields["obs_reset"] = reset_forms(_obs(0))
    return Tape(env={"id": "X-v0"}, **fields)


def test_a_dict_observation_keeps_one_digest_per_key_beside_the_whole(tmp_path):
    tape = _tape()
    assert tape.obs_keys == ("pixels", "state") and tape.obs_key_digest.shape == (6, 2)
    assert len(set(tape.obs_key_digest[:, 0].tolist())) == 4  # the dot moves
    assert len(set(tape.obs_key_digest[:, 1].tolist())) == 1  # the state does not
    assert len(set(tape.obs_digest.tolist())) == 4  # the whole digest is as before
    forms = tape.obs_reset["pixels"]
    assert {"value", "flip_vertical", "channels_reversed", "transpose"} <= set(forms)
    back = Tape.load(tape.save(tmp_path / "t.npz"))
    assert back.obs_keys == tape.obs_keys and back.obs_reset == tape.obs_reset
    assert np.array_equal(back.obs_key_digest, tape.obs_key_digest)


def test_an_array_observation_has_no_per_key_digests_but_its_forms():
    forms = reset_forms(np.arange(4.0))
    assert set(forms) == {"obs"} and set(forms["obs"]) == {"value", "reversed", "negated"}
    assert kept_obs(np.arange(4.0)).shape == (4,)


def _edited(tmp_path, edit) -> str:
    path = _tape().save(tmp_path / "t.npz")
    with zipfile.ZipFile(path) as z:
        arrays = {n[:-4]: np.load(z.open(n)) for n in z.namelist()}
    header = json.loads(arrays["header"].tobytes())
    edit(arrays, header)
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(UsageError) as caught:
        Tape.load(tmp_path / "bad.npz")
    return str(caught.value)


@pytest.mark.parametrize("edit,said", [
    (lambda a, h: a.update(obs_key_digest=a["obs_key_digest"][:3]), "obs_key_digest must be 6 rows"),
    (lambda a, h: h.pop("obs_keys"), "both obs_keys and obs_key_digest"),
    (lambda a, h: h.update(obs_keys=[1, 2]), "obs_keys must be a list of key names"),
    (lambda a, h: h.update(obs_reset={"pixels": {"value": 7}}), "obs_reset must be an object"),
])
def test_per_key_digests_that_disagree_with_the_tape_are_refused(tmp_path, edit, said):
    message = _edited(tmp_path, edit)
    assert said in message and message.endswith("re-record it with `rolltape eval`.")
