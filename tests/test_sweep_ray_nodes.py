"""A node that leaves mid-sweep: Ray's multi-node test cluster on this machine (marked ``ray``).

Its own module: the cluster (a head with no CPUs, two worker nodes with one timing slot each)
needs its own ``ray.init``. Two 15-second tasks start, one per node; one node is removed 6 s in.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster  # the ray extra: in the development install (README) and CI

from aitune_fp import ingest
from aitune_fp.sweep import parse_sweep, run_sweep
from aitune_fp.sweep.ray_executor import TIMING_RESOURCE, RayExecutor

from .test_sweep import read_log, sweep_data

pytestmark = pytest.mark.ray


def test_a_node_that_leaves_fails_its_task_and_the_rest_finish(tmp_path: Path) -> None:
    """The task on the removed node is recorded with Ray's error; the other node runs the rest."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    leaving = cluster.add_node(num_cpus=1, resources={TIMING_RESOURCE: 1})
    cluster.add_node(num_cpus=1, resources={TIMING_RESOURCE: 1})
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        timer = threading.Timer(6.0, lambda: cluster.remove_node(leaving))
        timer.start()
        log = tmp_path / "events.jsonl"
        spec = parse_sweep(sweep_data("napper", "napper-2", "tiny", "tiny-2"))
        result = run_sweep(spec, log_path=str(log), executor=RayExecutor(max_retries=0))
        timer.join()
    finally:
        ray.shutdown()
        cluster.shutdown()
    states = {s.model: s for s in result.statuses}
    assert states["tiny"].state == states["tiny-2"].state == "finished"
    nappers = [states["napper"], states["napper-2"]]
    died = [s for s in nappers if s.state == "failed"]
    assert len(died) == 1, nappers  # the one on the removed node; the other one finished
    assert died[0].error_type in ("NodeDiedError", "WorkerCrashedError")
    assert read_log(log)[-1]["failed_models"] == [died[0].model]
    assert len(ingest.ingest(str(log)).runs) == 3
