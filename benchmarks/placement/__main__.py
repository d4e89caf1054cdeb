"""``python -m benchmarks.placement``: see :mod:`.run`."""

import sys

from .run import main

sys.exit(main())
