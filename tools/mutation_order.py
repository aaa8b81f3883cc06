"""pytest plugin for mutation runs ([tool.mutmut] loads it with ``-p tools.mutation_order``).

mutmut runs each mutant's tests with ``-x``; this puts them fastest first, by the durations mutmut
recorded in mutmut-stats.json, so a mutant is usually killed by its cheapest failing test instead of
after the slow patch round trips. Outside a mutation run (no stats file) it does nothing.
"""

import json
from pathlib import Path


def pytest_collection_modifyitems(session, config, items):
    stats = Path("mutmut-stats.json")
    if not stats.exists():
        return
    try:
        durations = json.loads(stats.read_text()).get("duration_by_test", {})
    except (OSError, ValueError):
        return
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
