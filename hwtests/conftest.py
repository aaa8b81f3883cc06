"""hwtests: every file is a list of facts. The schedule helpers live beside them (schedule.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
