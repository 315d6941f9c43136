"""The cluster schema's tests run in a process of their own (``test_cluster_process.py``).

chDB holds one data directory per process, and the engine these tests start from a config file (a TCP port, the
shards at 127.0.0.1) was seen to stay initialised after its clients closed, so the next package of the same
test worker could not open its own directory. ``SEVENTS_CLUSTER_PROCESS`` is set only in that process.
"""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("SEVENTS_CLUSTER_PROCESS") else ["test_cluster_sql.py"]
