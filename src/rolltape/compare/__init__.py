"""Comparisons: several policies (or checkpoints) on the same seeds, and the runs' paired
statistics, learning curves and suite aggregates.

``runs`` loads and matches finished runs, ``checkpoints`` expands ``--policy`` lists and
checkpoint globs, ``sweep`` evaluates them one run each (``rolltape.evaluate``), ``strip``
renders one verified video across checkpoints, and ``report`` writes comparison.json and
comparison.html. The statistics themselves live in :mod:`rolltape.stats`.

May import: rolltape's orchestrator (evaluate, rendering), stats, outputs, files, errors.
Never: torch, SB3 or GL in this process (the policies run in evaluate's workers).
"""
