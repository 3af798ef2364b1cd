"""Imported first by the fork server: idle OpenMP threads spin briefly, compiles stay in process.

A pool spinning while another arm is timed takes its cores and shows as interference.
"""

from __future__ import annotations

import os

#: The wait settings a worker gets where the environment sets none.
WORKER_OPENMP_ENV = {"GOMP_SPINCOUNT": "10000", "KMP_BLOCKTIME": "1"}

if not any(k in os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
    os.environ.update(WORKER_OPENMP_ENV)
# a worker compiles in its own process: a pool of compile processes, killed with the worker,
# left its semaphores to the user's resource tracker (reported leaked at exit)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
