"""``python -m harness.gate BASE HEAD ...``: the PR gate (see ``harness.gate.run``)."""

import sys

from harness.gate.run import main

sys.exit(main())
