"""``python -m rolltape``: the ``rolltape`` command, for an environment whose scripts folder
is not on PATH.

May import: cli. Never: anything else (the CLI imports what each verb needs).
"""

import sys

from rolltape.cli import main

if __name__ == "__main__":
    sys.exit(main())
