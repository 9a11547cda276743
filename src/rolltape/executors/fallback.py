"""Which backend a job runs on next: the one rule both executors follow in pass 2.

Backends (GL libraries) are tried in the caller's order. A backend that crashes a worker,
hangs it or says it cannot work is dead for the rest of the run, and the job it held is
retried on the next live one; each (backend, reason) is kept for that job's result. When
every backend is dead, what is left cannot be done, and :meth:`BackendFallback.problem`
says so in one sentence.

May import: nothing of rolltape. Never: the work (pass 1, pass 2, outputs).

>>> fb = BackendFallback(["egl", "osmesa"], jobs=2)
>>> fb.backend_for(True), fb.backend_for(False)
('egl', None)
>>> fb.died(0, "egl", "it hung")
>>> fb.backend_for(True), fb.failures[0]
('osmesa', [('egl', 'it hung')])
>>> fb.died(1, "osmesa", "crash"); fb.backend_for(True), fb.problem()
('', 'Every GL backend failed (egl: it hung; osmesa: crash); run `rolltape doctor` to see what each needs.')
"""

from __future__ import annotations

from typing import Sequence


class BackendFallback:
    """The backend order, the backends that died (and why), and each job's failures."""

    def __init__(self, order: Sequence[str], jobs: int) -> None:
        self.order = list(order)
        self.dead: dict[str, str] = {}  # backend -> why it failed, in the order they failed
        self.failures: dict[int, list[tuple[str, str]]] = {i: [] for i in range(jobs)}

    def backend_for(self, needs_backend: bool) -> str | None:
        """The backend a job runs on now: None for a job that draws nothing, "" when every
        backend is dead (the job cannot run)."""
        if not needs_backend:
            return None
        alive = [b for b in self.order if b not in self.dead]
        return alive[0] if alive else ""

    def died(self, job: int, backend: str, reason: str) -> None:
        """``backend`` failed while running ``job``: mark it dead, remember why for the job."""
        self.dead.setdefault(backend, reason)
        self.failures[job].append((backend, reason))

    def problem(self) -> str | None:
        """One sentence when every backend is dead, else None."""
        if not self.order or len(self.dead) < len(self.order):
            return None
        reasons = "; ".join(f"{b}: {why}" for b, why in self.dead.items())
        return (f"Every GL backend failed ({reasons}); run `rolltape doctor` to see what "
                "each needs.")
