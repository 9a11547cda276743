"""Pass 1, the policy side: playing episodes with rendering off and recording them as tapes.

May import: policies, envs, tape. Never: the render side (pass2), executors, outputs.
"""
