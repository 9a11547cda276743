"""Where two tapes of the same episode (same task and seed) first part, and what the data
says the difference is.

:func:`first_divergence` walks both tapes in the order things happen: the reset
observation (as the env gave it, then as each policy saw it through its wrappers), then per
step the action, the observation after it, the reward and the flags. :func:`classify`
names the difference only where the tapes show it:

- an observation (as the env gave it or as the policy saw it) that equals the other run's
  flipped, transposed, channel-reordered, reversed or negated (the tape keeps the digests
  of those forms of the reset observation);
- an action whose differing dimensions are the other's times one constant (-1: a sign
  flip; else a scale); actions equal to the other's shifted by k steps (a time shift);
- float-epsilon action or reward differences (rounding);
- tapes made by different simulators (``meta["backend"]``: MuJoCo Warp's float32 worlds,
  or the env's own), which part from the reset on;
- the same actions but another observation after them (the dynamics, or the control rate
  when the cards say dt differs), the same everything but another reward (the reward
  function), one episode cut by its time limit where the other plays on (the horizon).

Anything else is "differs from step s on field f", with both values: never guessed.

May import: tape, numpy. Never: policies, pass 1, pass 2, executors.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as _field  # Divergence has a field named field
from typing import Any

import numpy as np

from rolltape.tape import MJWARP, Tape

# Differences this small, relative to the values, are float rounding (float32's epsilon
# is 1.2e-7; batched inference differs from per-row inference by a few of them).
#: a tape's ``meta["backend"]`` as a sentence names it
SIMULATORS = {MJWARP: "MuJoCo Warp"}
ROUNDING_RTOL = 1e-5
ROUNDING_ATOL = 1e-7
_MAX_SHIFT = 5  # time shifts looked for: 1..5 steps
_SHIFT_RUN = 3  # steps a shift must hold for
FORMS = {
    "flip_vertical": "flipped vertically (upside down)",
    "flip_horizontal": "flipped horizontally (mirrored)",
    "flip_both": "rotated by 180 degrees",
    "transpose": "transposed (height and width swapped)",
    "channels_reversed": "with its channels in reverse order (RGB <-> BGR)",
    "channels_first": "with its channels moved first (HWC -> CHW)",
    "channels_last": "with its channels moved last (CHW -> HWC)",
    "reversed": "reversed",
    "negated": "negated",
}


@dataclass
class Divergence:
    """Where two tapes part: the step (None: the reset observation), the field ("obs",
    "obs['key']", "policy input obs['key']", "action", "reward", "terminated",
    "truncated", "length"), both values as text, and what it is (``kind`` and
    ``sentence``; kind "unclassified" when the data does not say)."""

    step: int | None
    field: str
    a: str
    b: str
    kind: str = "unclassified"
    sentence: str = ""
    detail: dict[str, Any] = _field(default_factory=dict)

    @property
    def where(self) -> str:
        return "the reset" if self.step is None else f"step {self.step}"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "field": self.field, "a": self.a, "b": self.b,
                "kind": self.kind, "sentence": self.sentence, **self.detail}


def first_divergence(a: Tape, b: Tape) -> Divergence | None:
    """The first place where tapes ``a`` and ``b`` differ, unclassified; None when their
    steps are equal (value and dtype) throughout."""
    if _obs_differ(a, b, 0):
        return _obs_divergence(a, b, 0, None)
    seen = _policy_input(a, b)
    if seen is not None:
        return seen
    n = min(a.length, b.length)
    firsts = []
    for name in ("actions", "rewards", "terminated", "truncated"):
        x, y = getattr(a, name), getattr(b, name)
        if x.dtype != y.dtype or x.shape[1:] != y.shape[1:]:
            firsts.append((0, name))
            continue
        diff = _rows_differ(x[:n], y[:n])
        if diff.size:
            firsts.append((int(diff[0]), name))
    if a.obs_digest is not None and b.obs_digest is not None:
        diff = np.flatnonzero(a.obs_digest[1:n + 1] != b.obs_digest[1:n + 1])
        if diff.size:
            firsts.append((int(diff[0]), "obs"))
    if not firsts and a.length == b.length:
        return None
    order = {"actions": 0, "obs": 1, "rewards": 2, "terminated": 3, "truncated": 4}
    if not firsts:  # equal as far as both go: one ended without a flag the other has
        return Divergence(n, "length", str(a.length), str(b.length))
    step, name = min(firsts, key=lambda f: (f[0], order[f[1]]))
    if name == "obs":
        return _obs_divergence(a, b, step + 1, step)
    if name == "actions":
        return Divergence(step, "action", _show(a.actions[step]), _show(b.actions[step]))
    return Divergence(step, name.rstrip("s") if name == "rewards" else name,
                      _show(getattr(a, name)[step]), _show(getattr(b, name)[step]))


def classify(d: Divergence, a: Tape, b: Tape, card_diffs: dict[str, tuple[Any, Any]]
             ) -> Divergence:
    """Name ``d`` where the tapes show what it is (see the module's list); ``card_diffs``
    (card field -> (A, B)) is quoted where a difference of the data points at it."""
    if d.field.startswith("policy input"):
        return d  # named where found (_policy_input)
    made_by = [str(t.meta.get("backend") or "") for t in (a, b)]
    simulators = [SIMULATORS.get(m, m) or "the env's own simulator" for m in made_by]
    if simulators[0] != simulators[1]:
        return _named(d, "simulator", f"A was simulated by {simulators[0]}, B by "
                                      f"{simulators[1]} (MuJoCo Warp computes in float32, so "
                                      "its states part from CPU MuJoCo's from the reset on; "
                                      "`rolltape verify --flips` says how far, episode by "
                                      "episode)", simulators=simulators)
    if d.field.startswith("obs") and d.step is None:
        return _reset_obs(d, a, b)
    if d.field == "action":
        return _action(d, a, b, card_diffs)
    if d.field.startswith("obs"):
        return _after_same_action(d, card_diffs)
    if d.field == "reward":
        x, y = float(a.rewards[d.step]), float(b.rewards[d.step])
        if np.isclose(x, y, rtol=ROUNDING_RTOL, atol=ROUNDING_ATOL):
            return _named(d, "rounding", f"rewards differ by {abs(x - y):.3g} at {d.where}: "
                                         "float rounding")
        envs = _env_fields(card_diffs)
        return _named(d, "reward", f"the same observations and actions, another reward at "
                                   f"{d.where} (A {x!r}, B {y!r}): the reward function differs"
                                   + (f"; the cards differ in {envs}" if envs else ""))
    if d.field in ("terminated", "truncated", "length"):
        return _episode_end(d, a, b, card_diffs)
    return d


def unclassified_sentence(d: Divergence) -> str:
    """'differs from step s on field f: A ..., B ...'."""
    return f"differs from {d.where} on {d.field}: A {d.a}, B {d.b}"


# -- where ------------------------------------------------------------------------------
def _rows_differ(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of rows that differ (NaN equals NaN: the same bits of an env's NaN)."""
    same = (x == y) | ((x != x) & (y != y)) if x.dtype.kind == "f" else x == y
    if same.ndim > 1:
        same = same.reshape(same.shape[0], -1).all(axis=1)
    return np.flatnonzero(~same)


def _obs_differ(a: Tape, b: Tape, frame: int) -> bool:
    if a.obs_digest is None or b.obs_digest is None:
        return False
    return bool(a.obs_digest[frame] != b.obs_digest[frame])


def _obs_divergence(a: Tape, b: Tape, frame: int, step: int | None) -> Divergence:
    """The observation of ``frame`` differs: name its first differing key when both
    tapes digest each key."""
    if (a.obs_keys is not None and a.obs_keys == b.obs_keys and a.obs_key_digest is not None
            and b.obs_key_digest is not None):
        for k, name in enumerate(a.obs_keys):
            x, y = int(a.obs_key_digest[frame, k]), int(b.obs_key_digest[frame, k])
            if x != y:
                return Divergence(step, f"obs[{name!r}]", f"digest {x:016x}", f"digest {y:016x}",
                                  detail={"key": name})
    x, y = int(a.obs_digest[frame]), int(b.obs_digest[frame])  # type: ignore[index]
    key = next(iter(a.obs_reset)) if a.obs_reset and len(a.obs_reset) == 1 else None
    return Divergence(step, "obs", f"digest {x:016x}", f"digest {y:016x}",
                      detail={"key": key} if key else {})


def _policy_input(a: Tape, b: Tape) -> Divergence | None:
    """The env gave both the same reset observation; did their policies see the same?"""
    if not a.obs_reset or not b.obs_reset:
        return None
    for key in sorted(set(a.obs_reset) | set(b.obs_reset)):
        fa, fb = a.obs_reset.get(key, {}), b.obs_reset.get(key, {})
        sa, sb = fa.get("seen", fa.get("value")), fb.get("seen", fb.get("value"))
        if sa is None or sb is None or sa == sb:
            continue
        d = Divergence(None, f"policy input obs[{key!r}]", f"digest {sa}", f"digest {sb}",
                       detail={"key": key})
        ta, tb = _form_of(fa, sa), _form_of(fb, sb)
        if ta is not None and tb is not None:
            def said(t: str) -> str:
                return "as the env gave it" if t == "value" else FORMS.get(t, t)
            kind = next((t for t in (tb, ta) if t != "value"), ta)
            return _named(d, "policy_input_transform",
                          f"the env gave both the same reset observation, but A's policy saw "
                          f"{key!r} {said(ta)} and B's {said(tb)} (a policy-side wrapper)",
                          form=kind)
        return _named(d, "unclassified", unclassified_sentence(d) + " (what the policies "
                      "saw at the reset differs, not by a flip, transpose or channel order "
                      "rolltape checks)")
    return None


def _form_of(forms: dict[str, str], digest: str) -> str | None:
    return next((f for f, v in forms.items() if v == digest and f != "seen"), None)


# -- what -------------------------------------------------------------------------------
def _named(d: Divergence, kind: str, sentence: str, **detail: Any) -> Divergence:
    d.kind, d.sentence = kind, sentence
    d.detail.update(detail)
    return d


def _reset_obs(d: Divergence, a: Tape, b: Tape) -> Divergence:
    key = d.detail.get("key")
    fa = (a.obs_reset or {}).get(key or "", {})
    fb = (b.obs_reset or {}).get(key or "", {})
    if fa and fb:
        form = _form_of(fa, fb.get("value", ""))
        if form is not None and form != "value":
            return _named(d, "obs_transform", f"B's reset observation {key!r} is A's "
                                              f"{FORMS.get(form, form)}", form=form)
        back = _form_of(fb, fa.get("value", ""))
        if back is not None and back != "value":
            return _named(d, "obs_transform", f"A's reset observation {key!r} is B's "
                                              f"{FORMS.get(back, back)}", form=back)
    return _named(d, "unclassified", unclassified_sentence(d) + " (the reset observations "
                  "differ: another env, kwargs or reset)")


def _action(d: Divergence, a: Tape, b: Tape, card_diffs: dict[str, tuple[Any, Any]]
            ) -> Divergence:
    t = d.step
    assert t is not None
    if a.actions.dtype != b.actions.dtype or a.actions.shape[1:] != b.actions.shape[1:]:
        return _named(d, "unclassified", f"{unclassified_sentence(d)} (the actions are "
                      f"{a.actions.dtype}{list(a.actions.shape[1:])} in A, "
                      f"{b.actions.dtype}{list(b.actions.shape[1:])} in B)")
    x = np.asarray(a.actions[t], dtype=np.float64).ravel()
    y = np.asarray(b.actions[t], dtype=np.float64).ravel()
    shift = _time_shift(a, b, t)
    if shift:
        k, later, whole = shift
        timing = "".join(f"; the cards differ in {name} ({v[0]} vs {v[1]})"
                         for name, v in card_diffs.items()
                         if name.endswith((".latency", ".execute_steps")))
        said = (f"{later}'s actions are the other's delayed by {k} step(s) from {d.where} on"
                if whole else
                f"{later}'s action at step {t + k} is exactly the other's at {d.where}: {later} "
                f"acts {k} step(s) late (the episodes part after it)")
        return _named(d, "time_shift", said + timing, shift=k, later=later)
    if a.actions.dtype.kind == "f" and np.allclose(x, y, rtol=ROUNDING_RTOL, atol=ROUNDING_ATOL):
        how = "".join(f"; the cards differ in {k} ({v[0]} vs {v[1]})"
                      for k, v in card_diffs.items() if k.startswith("execution.batch"))
        return _named(d, "rounding", f"actions differ by at most {np.max(np.abs(x - y)):.3g} "
                                     f"at {d.where}: float rounding{how}")
    dims = np.flatnonzero(x != y)
    ratios = y[dims] / np.where(x[dims] == 0, np.nan, x[dims])
    # A ratio of 0 is no scale: one side's action is zero (a hold), shown as it is.
    if dims.size and np.isfinite(ratios).all() and ratios[0] != 0 \
            and np.allclose(ratios, ratios[0], rtol=1e-6):
        r = float(ratios[0])
        which = ("every dimension" if dims.size == x.size else
                 f"dimension{'s' if dims.size > 1 else ''} {', '.join(map(str, dims))}")
        r_text = f"{r:.6g}"
        if np.isclose(r, -1.0, rtol=1e-6):
            return _named(d, "action_sign", f"B's action is A's with the sign flipped on "
                                            f"{which} at {d.where} (the rest equal)",
                          dims=dims.tolist(), ratio=-1.0)
        return _named(d, "action_scale", f"B's action is A's times {r_text} on {which} at "
                                         f"{d.where} (the rest equal)",
                      dims=dims.tolist(), ratio=r)
    return _named(d, "unclassified", unclassified_sentence(d) + " (the same observation "
                  "so far, another action: the policy or its post-processing differs)")


def _time_shift(a: Tape, b: Tape, t: int) -> tuple[int, str, bool] | None:
    """(k, 'A' or 'B', whole): one's actions from step t on equal the other's k steps
    earlier (whole: for the rest of the episode, an open-loop policy; else the first one
    only, bit for bit and not all zeros: a closed-loop policy's next observations differ)."""
    if a.actions.dtype != b.actions.dtype or a.actions.shape[1:] != b.actions.shape[1:]:
        return None
    for whole in (True, False):
        for k in range(1, _MAX_SHIFT + 1):
            for later, x, y in (("B", a.actions, b.actions), ("A", b.actions, a.actions)):
                m = min(len(x) - t, len(y) - t - k)
                if m < (_SHIFT_RUN if whole else 1) or np.array_equal(x[t:t + m], y[t:t + m]):
                    continue
                if whole and np.array_equal(y[t + k:t + k + m], x[t:t + m]):
                    return k, later, True
                if not whole and np.any(x[t] != 0) and np.array_equal(y[t + k], x[t]):
                    return k, later, False
    return None


def _env_fields(card_diffs: dict[str, tuple[Any, Any]]) -> str:
    names = [k for k in card_diffs if k.startswith("envs.")]
    return ", ".join(names[:4])


def _after_same_action(d: Divergence, card_diffs: dict[str, tuple[Any, Any]]) -> Divergence:
    dt = {k: v for k, v in card_diffs.items() if k.endswith(".control.dt")}
    if dt:
        (name, (x, y)), = list(dt.items())[:1]
        skip = {k: v for k, v in card_diffs.items() if k.endswith(".control.frame_skip")}
        skip_text = "".join(f", frame skip {v[0]} vs {v[1]}" for v in skip.values())
        return _named(d, "control_rate", f"the same actions, another observation after "
                                         f"{d.where}: the control rate differs (dt = timestep "
                                         f"x frame skip: A {x} s, B {y} s{skip_text})")
    envs = _env_fields(card_diffs)
    return _named(d, "dynamics", f"the same actions, another observation after {d.where} "
                                 f"({d.field}): the env's dynamics differ"
                  + (f"; the cards differ in {envs}" if envs else " (the cards do not say why)"))


def _episode_end(d: Divergence, a: Tape, b: Tape, card_diffs: dict[str, tuple[Any, Any]]
                 ) -> Divergence:
    """Equal until one episode ends where the other plays on."""
    shorter, other = ("A", "B") if a.length < b.length else ("B", "A")
    s_tape = a if shorter == "A" else b
    if a.length != b.length and d.step == s_tape.length - 1 and bool(s_tape.truncated[-1]) \
            and not s_tape.terminated[-1]:
        limits = [v for k, v in card_diffs.items()
                  if k.endswith((".horizon", ".max_episode_steps"))][:1]
        said = "".join(f" (card: time limit A {x}, B {y})" for x, y in limits)
        return _named(d, "horizon", f"the same steps until {shorter}'s time limit cuts it at "
                                    f"{s_tape.length} steps while {other}'s plays on to "
                                    f"{max(a.length, b.length)}: a different horizon{said}",
                      lengths=[a.length, b.length])
    return _named(d, "unclassified", unclassified_sentence(d))


def _show(value: Any) -> str:
    """A value at full precision (repr of each number), shortened past 8 numbers."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(arr.item())
    items = [repr(v) for v in arr.ravel()[:8].tolist()]
    return "[" + ", ".join(items) + (", ...]" if arr.size > 8 else "]")
