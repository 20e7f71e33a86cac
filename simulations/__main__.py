"""``python -m simulations``: reproduce paper experiments, list them, run benchmarks."""

import sys

from .cli import main

sys.exit(main())
