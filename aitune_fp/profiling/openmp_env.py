"""Imported first by the fork server (never by the user's process): how idle OpenMP threads wait."""

from __future__ import annotations

import os

#: The wait settings a worker gets where the environment sets none.
WORKER_OPENMP_ENV = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "1"}

if not any(k in os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
    os.environ.update(WORKER_OPENMP_ENV)
