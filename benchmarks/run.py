"""Run rolltape's benchmarks: the same as ``rolltape bench`` (see benchmarks/README.md).

    python benchmarks/run.py                  # full run, minutes; writes bench-out/
    python benchmarks/run.py --quick          # seconds, numbers not meaningful
    python benchmarks/run.py --only render_rss --rss-frames 1000,3000
"""

import sys

from rolltape.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
