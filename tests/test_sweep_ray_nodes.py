"""A node that leaves mid-sweep: Ray's multi-node test cluster on this machine (marked ``ray``).

Its own module: the cluster (a head with no CPUs, two worker nodes with one timing slot each)
needs its own ``ray.init``. Two napping tasks start, one per node; one node is removed as soon
as both have said they started, while both still nap 3 s (no fixed delay to guess on a slow
machine).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster  # the ray extra: in the development install (README) and CI

from aitune_fp.events import ingest
from aitune_fp.sweep.ray_executor import TIMING_RESOURCE, RayExecutor
from aitune_fp.sweep.run import run_sweep
from aitune_fp.sweep.spec import parse_sweep

from .sweep_models import NAP_DIR_ENV
from .test_sweep import read_log, sweep_data

pytestmark = pytest.mark.ray


def _remove_once_both_nap(cluster: Cluster, node: object, folder: Path) -> None:
    """Take ``node`` away as soon as both nappers have started (at most 60 s from now)."""
    give_up = time.monotonic() + 60.0
    while len(list(folder.glob("napper-*"))) < 2 and time.monotonic() < give_up:
        time.sleep(0.05)
    cluster.remove_node(node)


def test_a_node_that_leaves_fails_its_task_and_the_rest_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task on the removed node is recorded with Ray's error; the other node runs the rest."""
    naps = tmp_path / "naps"
    naps.mkdir()
    monkeypatch.setenv(NAP_DIR_ENV, str(naps))  # before the nodes start: their workers see it
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    leaving = cluster.add_node(num_cpus=1, resources={TIMING_RESOURCE: 1})
    cluster.add_node(num_cpus=1, resources={TIMING_RESOURCE: 1})
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        timer = threading.Thread(target=_remove_once_both_nap, args=(cluster, leaving, naps))
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
