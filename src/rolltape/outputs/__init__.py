"""What a run writes for people: files and provenance, the report, the notebook, the 3-D
viewer, the summary they all show.

May import: tape, envs, stats, files, errors, outputs. Never: policies, pass 1, executors.
"""
