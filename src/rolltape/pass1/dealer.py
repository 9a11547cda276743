"""Dealing pass-1 episodes to workers a piece at a time, so that none waits while another
still has episodes left.

Each worker starts on its own share (episode i to worker i mod W, as
:func:`rolltape.pass1.rollout.split_jobs` deals them) and asks for its next piece when it
has played one; a worker whose share is used up takes the last piece of the share that has
the most episodes left. Episodes of equal length finish together as fixed shares did;
unequal ones (Atari games, episodes that end early) no longer leave one core idle while
the other plays the long ones. Every episode is reset with its own seed, so its tape is
the same whichever worker plays it.

May import: pass1.rollout. Never: an executor, the render side, outputs.

>>> from rolltape.pass1.rollout import Episodes, PolicyJob, split_jobs
>>> job = PolicyJob(env={"id": "CartPole-v1"}, policy="random",
...                 episodes=Episodes("policy", range(6), seed=0, tapes="tapes"))
>>> dealer = Dealer(split_jobs([job], 2), piece=1)
>>> def indices(piece): return [e.index for j in piece for e in j.episodes]
>>> indices(dealer(0)), indices(dealer(1)), indices(dealer(0)), indices(dealer(0))
([0], [1], [2], [4])
>>> indices(dealer(0)), indices(dealer(1)), dealer(1)
([5], [3], None)
"""

from __future__ import annotations

from dataclasses import replace

from rolltape.pass1.rollout import PolicyJob

PIECE_MAX = 64  # episodes; a piece costs one message each way (well under a millisecond)


def piece_size(episodes: int, workers: int) -> int:
    """Episodes per piece: about 16 pieces per worker, so that the last one left costs
    little, and at most :data:`PIECE_MAX`.

    >>> piece_size(8, 2), piece_size(100, 2), piece_size(10**12, 4)
    (1, 3, 64)
    """
    return max(1, min(PIECE_MAX, episodes // (16 * max(1, workers))))


class Dealer:
    """``dealer(w)`` is worker ``w``'s next piece (a list of jobs), None when every episode
    has been dealt; ``playing[w]`` is the piece it was given last. ``piece``: episodes per
    piece (default :func:`piece_size` of the shares, and at least the episodes a worker
    plays at once on a served env: ``PolicyJob.in_flight``)."""

    def __init__(self, shares: list[list[PolicyJob]], piece: int | None = None) -> None:
        self._left = [list(share) for share in shares]  # jobs with episodes not dealt yet
        jobs = [j for s in shares for j in s]
        self._piece = piece or max([piece_size(sum(len(j.episodes) for j in jobs), len(shares)),
                                    *(j.in_flight for j in jobs)])
        self.playing: list[list[PolicyJob]] = [[] for _ in shares]

    def __call__(self, worker: int) -> list[PolicyJob] | None:
        own = self._left[worker]
        most = own or max(self._left, key=lambda jobs: sum(len(j.episodes) for j in jobs))
        piece = self._take(most, head=bool(own)) if most else None
        self.playing[worker] = piece or []
        return piece

    def _take(self, jobs: list[PolicyJob], head: bool) -> list[PolicyJob]:
        """The first piece of ``jobs`` (its own share) or the last (taken from another's)."""
        k = 0 if head else -1
        job = jobs[k]
        n = min(self._piece, len(job.episodes))
        taken, rest = ((job.episodes[:n], job.episodes[n:]) if head else
                       (job.episodes[-n:], job.episodes[:-n]))
        if len(rest):
            jobs[k] = replace(job, episodes=rest)
        else:
            del jobs[k]
        return [replace(job, episodes=taken)]
