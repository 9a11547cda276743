"""Tiny policies and envs that the tests name by import path (``tests.assets.MODULE:ATTR``).

They are imported in pass-1 and render worker subprocesses, so the repository root must be
importable there: the tests run from the repository root (``python -m pytest``), whose
``sys.path[0]`` (the current folder) the workers inherit; the tests also put the root on
``PYTHONPATH`` so that they work from any folder.
"""
