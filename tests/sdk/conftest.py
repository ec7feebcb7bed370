"""The SDK tests' helper modules (``*_harness.py`` beside this file) import by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
