"""Pass 2, the render side: replaying tapes in render workers, GL backends, cameras, encoders.

May import: envs, tape. Never: policies, pass 1, torch or SB3, executors, outputs.
"""
