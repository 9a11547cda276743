"""``python -m rolltape.cli ARGS``: the ``rolltape`` command."""

import sys

from rolltape.cli import main

sys.exit(main())
