"""``rolltape bench`` without the installed command, same flags (see benchmarks/README.md)."""
import sys

from rolltape.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
