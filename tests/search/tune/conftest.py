"""One real local Ray for the tests of this folder that drive Ray Tune in the test process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="package")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray in this process, as a search starts one (2 CPUs, no GPU), started by the
    first test here that asks for it and stopped after the folder's last test; its value is the
    ``DMLSEARCH_CACHE`` set while it runs, which its trial processes inherit (they are started
    by Ray, with the environment Ray had when it started). Each start and stop of Ray costs
    5-6 s of wall time and about 4 CPU-seconds; the folder's Tune tests used to pay it once
    each. The other tests here start Ray, if at all, in processes of their own."""
    from dmlsearch.search.tune.ray_runtime import init_ray
    from dmlsearch.search.tune.ray_runtime import ray_running
    from dmlsearch.search.tune.ray_runtime import shutdown_ray

    cache = tmp_path_factory.mktemp("tune-cache")
    running = ray_running()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DMLSEARCH_CACHE", str(cache))
        init_ray(num_cpus=2, num_gpus=0)
        yield cache
        if not running:
            shutdown_ray()
