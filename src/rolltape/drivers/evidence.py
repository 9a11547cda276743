"""``rolltape eval`` with ``--until`` (stop when the answer is known) or ``--recipe``
(several training runs per recipe): the flags checked together, then handed to
:mod:`rolltape.drivers.until` or :mod:`rolltape.compare.recipes`. Returns the lines the CLI
prints.

May import: compare, stats, errors. Never: torch, SB3, GL.
"""

from __future__ import annotations

from typing import Any

from rolltape.errors import UsageError

__all__ = ["eval_evidence"]


def eval_evidence(env: str | None, policies: list[str], recipes: list[str], *,
                  until: str | None, margin: float, max_episodes: int | None, batch: int,
                  episodes: int, return_bounds: str | None, reference: str | None,
                  **options: Any) -> list[str]:
    """Run an ``--until`` or ``--recipe`` evaluation; the lines to print."""
    if until is None and not recipes:
        used = [flag for flag, on in (("--max-episodes", max_episodes is not None),
                                      ("--margin", bool(margin)),
                                      ("--return-bounds", return_bounds is not None)) if on]
        raise UsageError(f"{' and '.join(used)} shape(s) an --until evaluation; add --until "
                         "'width<W' or --until decided, or drop them.")
    if until is not None and recipes:
        raise UsageError("--until and --recipe cannot be combined yet: evaluate the recipes "
                         "with --episodes, or one checkpoint with --until.")
    if reference is not None:
        raise UsageError("--reference applies to several --policy without --until/--recipe; "
                         "drop it.")
    if recipes:
        if policies:
            raise UsageError("--recipe names every policy of the run; drop --policy (or give "
                             "it as one more --recipe NAME=SOURCE).")
        from rolltape.compare.recipes import summary_lines
        from rolltape.drivers.recipes import evaluate_recipes

        return summary_lines(evaluate_recipes(env, recipes, episodes=episodes, **options))
    from rolltape.drivers.until import evaluate_until, parse_bounds, parse_until
    from rolltape.drivers.until import summary_lines as until_lines

    rule = parse_until(until or "", margin=margin, max_episodes=max_episodes, batch=batch)
    result = evaluate_until(env, policies or ["random"], rule,
                            return_bounds=parse_bounds(return_bounds), **options)
    return until_lines(result) + [f"written to {options['out']}/ (until.json, until.svg)"]
