"""The secure-aggregation tests' helper module (``secagg_harness.py``) imports by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
