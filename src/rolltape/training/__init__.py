"""Recording during training: tapes in the loop, videos in background render processes.

May import: the policy side's recording helpers, the render entry point, envs, tape. Never:
imported by pass 2, by pass 1 or by ``import rolltape`` itself (only lazily).
"""
