"""Branches: an episode continued from a state its tape recorded, by the same policy.

A branch from step t restores the episode *for continuing*, not only for drawing:

- the env is reset with the tape's seed and options (the wrappers' own bookkeeping, the
  env's generator, Gymnasium's order checks start as they did);
- for t > 0 the recorded state after t - 1 steps is set (MuJoCo's integration state; an
  Atari game's emulator state, RNG included, after the steps before it taken again so that
  sticky actions repeat the right action) and the recorded action t - 1 is stepped once
  more, so the observation the policy sees at t is the very one pass 1 computed (MuJoCo envs
  read body poses the last substep left, which a state alone does not hold), the TimeLimit
  counts t steps, and the state after it is compared with the tape's state t bit for bit,
  as are that step's reward, flags and observation digest: a state that cannot be
  restored faithfully is refused in one sentence;
- the policy is reset as at a fresh episode (``Policy.reset`` with the branch's seed:
  a stochastic policy samples from that seed), and a deterministic one may be perturbed by
  seeded Gaussian action noise (:class:`Perturbed`).

The branch is saved as a tape that begins with recorded steps of the source episode, so
``rolltape verify`` re-simulates it like any other tape: a MuJoCo branch at step t - 1
(``start_step``, from its recorded state), an Atari branch at the reset (ALE's states are
continued from only with the steps before them, which a tape that began later would lack).
A branch job is a pass-1 job (:class:`BranchJob`): it is dealt to workers, run on Ray and
reported exactly as episodes are.

May import: envs, tape, policies, pass1.rollout, pass1.fields, errors. Never: an executor,
the render side, outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rolltape.envs.state import continue_atari, continue_from, physics_spec, set_elapsed_steps
from rolltape.errors import UsageError
from rolltape.pass1.fields import success_flag
from rolltape.pass1.rollout import EpisodeJob, Opened, PolicyJob, record_episode
from rolltape.policies import Policy
from rolltape.tape import Tape

# Why a run played through wrappers is not branched: one sentence, said when a tape names
# them (before any work) or a worker finds them (a zoo folder's, which the tape may not name).
WRAPPED = ("rolltape branch cannot continue an episode played through policy-side wrappers "
           "({names}): their state at step t (a frame stack's last frames, AtariWrapper's "
           "life and no-op counters) is not on the tape, which keeps the base env's "
           "observations only as digests; branch a run whose policy saw the base env's "
           "observations (no --wrapper, --frame-stack or zoo env_wrapper).")


def branch_refusal(tape: Tape, path: str) -> str | None:
    """Why ``tape``'s episode cannot be continued from its recorded states, or None.

    >>> t = Tape(seed=0, env={"id": "CartPole-v1"}, actions=np.zeros((2, 1)),
    ...          rewards=np.zeros(2), terminated=np.zeros(2, bool), truncated=np.zeros(2, bool))
    >>> branch_refusal(t, "a.npz")[:59]
    "Tape 'a.npz' (CartPole-v1) holds no MuJoCo or ALE state, so"
    """
    if tape.physics is None and not tape.has_ale_state:
        return (f"Tape '{path}' ({tape.env_id}) holds no MuJoCo or ALE state, so rolltape "
                "cannot restore it faithfully to continue its episode; branch works on "
                "tapes of MuJoCo and Atari envs.")
    if tape.seed is None or tape.start_step or tape.reset_rng is not None or tape.window:
        return (f"Tape '{path}' was not recorded from a seeded reset (a training recording), "
                "so its env's bookkeeping cannot be rebuilt; branch from an `rolltape eval` "
                "run's tapes.")
    wrappers = tape.policy.get("wrappers") if isinstance(tape.policy, dict) else None
    if wrappers:
        return WRAPPED.format(names=", ".join(map(str, wrappers))[:200])
    return None


class RestoredStart(gym.Wrapper):
    """``env`` whose ``reset`` puts the tape's episode at step ``t``, ready to continue
    (see the module's docstring); ``reset`` ignores the seed it is given (the branch's, for
    the policy) and resets with the tape's."""

    def __init__(self, env: Any, tape: Tape, t: int, path: str) -> None:
        super().__init__(env)
        self.tape, self.t, self.path = tape, t, path

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        tape, t = self.tape, self.t
        if t and tape.physics is None:
            # Atari: the emulator state set next holds the game and its RNG; a seeded reset
            # would only reload the ROM (0.09 s).
            self.env.reset()
            continue_atari(self.env, tape, t - 1)
        else:
            obs, info = self.env.reset(seed=tape.seed, options=tape.options)
            if t == 0:
                return obs, info
            assert tape.physics is not None  # checked by branch_refusal
            continue_from(self.env, tape.physics[t - 1])
        set_elapsed_steps(self.env, t - 1)
        obs, reward, term, trunc, info = self.env.step(tape.actions[t - 1])
        self._check(t, reward, term, trunc, obs)
        return obs, info

    def _check(self, t: int, reward: Any, term: bool, trunc: bool, obs: Any) -> None:
        """Refuse unless the restored step is pass 1's step t - 1, bit for bit."""
        tape = self.tape
        wrong = None
        if not self._same_state(t):
            wrong = "its physics state" if tape.physics is not None else "its emulator state"
        elif float(reward) != float(tape.rewards[t - 1]) and not (
                np.isnan(reward) and np.isnan(tape.rewards[t - 1])):
            wrong = "its reward"
        elif bool(term) != bool(tape.terminated[t - 1]) or bool(trunc) != bool(tape.truncated[t - 1]):
            wrong = "its end-of-episode flags"
        # The observation is checked from the branch's tape (check_observation): its
        # digests are taken for all steps at once there, one alone costs as much.
        if wrong:
            self.refuse(wrong)

    def check_observation(self, digests: Any) -> None:
        """Refuse unless the observation the branch began with (the first of its tape's
        ``digests``) is pass 1's at step t."""
        tape, t = self.tape, self.t
        if (t and tape.obs_digest is not None and digests is not None
                and int(digests[0]) != int(tape.obs_digest[t])):
            self.refuse("its observation")

    def refuse(self, wrong: str) -> None:
        """The state at step t cannot be continued faithfully: ``wrong`` differs."""
        raise UsageError(
            f"Tape '{self.path}' ({self.tape.env_id}) cannot be restored faithfully at step "
            f"{self.t}: continuing from its recorded state gives another {wrong[4:]} than "
            "pass 1 (the env keeps state its recorded one does not hold); it cannot be "
            "branched.")

    def _same_state(self, t: int) -> bool:
        """Whether the env's state is the tape's state t, bit for bit."""
        base = self.env.unwrapped
        if self.tape.physics is None:  # Atari (branch_refusal): ALE's state, RNG included
            ale = getattr(base, "ale")
            return bool(ale.cloneState(include_rng=True).serialize() == self.tape.ale_state_at(t))
        import mujoco

        model, data = getattr(base, "model"), getattr(base, "data")
        state = np.empty(mujoco.mj_stateSize(model, physics_spec()))
        mujoco.mj_getState(model, data, state, physics_spec())
        return bool(np.array_equal(state, self.tape.physics[t]))


class Perturbed(Policy):
    """``inner``'s actions, perturbed from a generator seeded at each ``reset`` with the
    branch's seed: continuous actions get Gaussian noise of ``sigma`` times the half-width
    of the action space's bounds (1 where a bound is infinite), clipped to the bounds;
    discrete ones are replaced, with probability ``sigma``, by a uniformly drawn action
    (epsilon-greedy). ``sigma`` 0 gives ``inner``'s actions untouched."""

    def __init__(self, inner: Policy, sigma: float, space: Any) -> None:
        self.inner, self.sigma = inner, sigma
        self.description = inner.description
        self.discrete = isinstance(space, gym.spaces.Discrete)
        if sigma and not (self.discrete or isinstance(space, gym.spaces.Box)):
            raise UsageError(f"--noise perturbs Box or Discrete actions; this env's actions "
                             f"are {type(space).__name__}: use --noise 0 with a stochastic "
                             "policy.")
        if sigma > 1 and self.discrete:
            raise UsageError(f"--noise is the probability of a random action for this env's "
                             f"discrete actions, so at most 1; got {sigma}.")
        self.rng = np.random.default_rng(0)
        if self.discrete:
            self.n, self.start = int(space.n), int(space.start)
        elif isinstance(space, gym.spaces.Box):
            self.low, self.high = space.low, space.high
            finite = np.isfinite(self.low) & np.isfinite(self.high)
            self.half = np.where(finite, (self.high - self.low) / 2, 1.0)
            self.scale = sigma * self.half  # what sigma * half * z multiplies first

    def reset(self, seed: int | None) -> None:
        self.inner.reset(seed)
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any) -> Any:
        action = self.inner.act(obs)
        if not self.sigma:
            return action
        if self.discrete:
            if self.rng.random() < self.sigma:
                return np.asarray(action).dtype.type(self.start + self.rng.integers(self.n))
            return action
        action = np.asarray(action)
        # np.clip's bits, without its dispatch (a few us a step, the step itself ~100 us).
        noisy = action + self.scale * self.rng.standard_normal(action.shape)
        np.minimum(np.maximum(noisy, self.low, out=noisy), self.high, out=noisy)
        return noisy.astype(action.dtype, copy=False)


@dataclass(frozen=True)
class BranchUnit(EpisodeJob):
    """One branch: its ``index`` among the run's branches, its ``seed`` (the policy's and
    the noise's), where its tape goes, and what it continues: the ``source`` tape from
    step ``step`` (t), as branch number ``branch`` (k), with action noise ``noise``."""

    source: str = ""
    step: int = 0
    branch: int = 0
    noise: float = 0.0


_FIRST_SUCCESS: dict[str, int | None] = {}  # source tape -> first step whose info said success


@dataclass(frozen=True)
class BranchJob(PolicyJob):
    """Branches of a run's episodes, played as a pass-1 job of :class:`BranchUnit`s."""

    def play(self, opened: Opened, ep: EpisodeJob) -> dict[str, Any]:
        assert isinstance(ep, BranchUnit)
        if opened.wrapped is not None:  # wrappers the tape did not name (a zoo folder's)
            raise UsageError(WRAPPED.format(names=", ".join(opened.wrapped.names)))
        tape = Tape.load(ep.source)
        refusal = branch_refusal(tape, ep.source)
        if refusal:
            raise UsageError(refusal)
        if not 0 <= ep.step < tape.length:
            raise UsageError(f"Step {ep.step} is outside tape '{ep.source}' (steps 0.."
                             f"{tape.length - 1}).")
        start = RestoredStart(opened.env, tape, ep.step, ep.source)
        policy = Perturbed(opened.policy, ep.noise, opened.env.action_space)
        fields = record_episode(start, policy, ep.seed, None, self.success_key)
        start.check_observation(fields.get("obs_digest"))
        before = self._success_before(opened.env, tape, ep)
        return _with_recorded_step(fields, tape, ep.step, before)

    def episode_meta(self, ep: EpisodeJob) -> dict[str, Any]:
        assert isinstance(ep, BranchUnit)
        return {**super().episode_meta(ep), "branch_of": ep.source, "step": ep.step,
                "branch": ep.branch, "noise": ep.noise}

    def _success_before(self, env: Any, tape: Tape, ep: BranchUnit) -> bool:
        """Whether the source episode's info said success at a step before t (steps whose
        info the branch does not see): found once per source tape, by re-simulating it."""
        if not tape.success_once or self.success_key is None:
            return False
        if ep.source not in _FIRST_SUCCESS:
            env.reset(seed=tape.seed, options=tape.options)
            first = None
            for i, action in enumerate(tape.actions):
                info = env.step(action)[-1]
                if success_flag(info.get(self.success_key)):
                    first = i
                    break
            _FIRST_SUCCESS[ep.source] = first
        first = _FIRST_SUCCESS[ep.source]
        return first is not None and first < ep.step


def _with_recorded_step(fields: dict[str, Any], tape: Tape, t: int, before: bool
                        ) -> dict[str, Any]:
    """The branch's tape fields, beginning with recorded steps of the source so that it
    re-simulates like any tape: MuJoCo's step t - 1 (from state t - 1, as the branch was
    restored, a tape that begins mid-episode), Atari's steps 0..t-1 (from the reset); the
    seed is the source's. ``before``: the source's success was reported before step t (it
    counts for ``success_once``)."""
    fields = {**fields, "seed": tape.seed, "options": tape.options}
    if before:
        fields["success_once"] = True
    if t == 0:
        return fields
    k = t - 1 if tape.physics is not None else 0
    if k:
        fields["start_step"] = k
    if fields.get("ale_state") is not None and tape.has_ale_state:
        assert tape.ale_state is not None and tape.ale_state_offsets is not None
        offsets = tape.ale_state_offsets
        fields["ale_state"] = np.concatenate([tape.ale_state[offsets[k]:offsets[t]],
                                              fields["ale_state"]])
        fields["ale_state_offsets"] = np.concatenate(
            [offsets[k:t] - offsets[k], fields["ale_state_offsets"] + (offsets[t] - offsets[k])])
    else:
        fields["ale_state"] = fields["ale_state_offsets"] = None
    fields["actions"] = np.concatenate([tape.actions[k:t], fields["actions"]])
    for name in ("rewards", "terminated", "truncated"):
        fields[name] = np.concatenate([getattr(tape, name)[k:t], fields[name]])
    # The observations' digests (a dict observation's per key too: a maze's, Adroit's).
    for name in ("obs_digest", "obs_key_digest"):
        if fields.get(name) is not None and getattr(tape, name) is not None:
            fields[name] = np.concatenate([getattr(tape, name)[k:t], fields[name]])
        else:
            fields[name] = None
    if fields["obs_key_digest"] is None:
        fields["obs_keys"] = None
    for name in ("physics", "qpos", "qvel"):
        if fields.get(name) is not None:
            fields[name] = np.concatenate([getattr(tape, name)[k:t], fields[name]])
    return fields
