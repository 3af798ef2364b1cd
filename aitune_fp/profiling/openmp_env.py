"""Imported first by the fork server (never by the user's process): how idle OpenMP threads wait.

An OpenMP pool spins after each parallel region (libgomp about 3-5 ms of CPU here, Intel's
200 ms) before it sleeps. One worker's threads spinning while another arm is timed take that
arm's cores and show as interference, so workers spin briefly: ``GOMP_SPINCOUNT`` 10,000 and
``KMP_BLOCKTIME`` 1 ms, set before torch loads OpenMP, unless the environment sets the wait
policy already (docs/threads.md).
"""

from __future__ import annotations

import os

#: The wait settings a worker gets where the environment sets none.
WORKER_OPENMP_ENV = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "1"}

if not any(k in os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
    os.environ.update(WORKER_OPENMP_ENV)
