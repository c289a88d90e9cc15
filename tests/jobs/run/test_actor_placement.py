"""A model actor on a (fake) GPU in real Ray: it reserves a CPU next to its GPU, so the scorers' tasks
get only the CPUs left; without CUDA it refuses unless the cluster is a rehearsal, where it runs on CPU
and records that it did (jobs/run/actors.py pick_device; docs/cluster.md)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")

from jobs.run.actors import GPU_ACTOR_CPUS, spawn_model_actor  # noqa: E402
from jobs.run.local_ray import start_ray, stop_ray  # noqa: E402
from streamgen.config import RayConfig, model_config  # noqa: E402

pytestmark = pytest.mark.integration

WORKERS, SCORERS = 1, 1  # a local run's Ray: workers + score_workers CPUs (jobs/run/driver.py)


@pytest.fixture(scope="module", autouse=True)
def ray_session(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))
    session = start_ray(RayConfig(num_cpus=WORKERS + SCORERS, num_gpus=1, object_store_mb=128),
                        default_num_cpus=WORKERS + SCORERS)
    yield
    stop_ray(session)


def _score_like() -> int:
    """Stands in for jobs.run.rows' scoring task (num_cpus=1)."""
    return os.getpid()


def test_a_rehearsal_actor_holds_its_gpu_reserves_a_cpu_and_records_the_fallback() -> None:
    actor = spawn_model_actor(model_config("tiny-llama"), use_gpu=True, cpu_fallback=True)
    info = ray.get(actor.info.remote(), timeout=300)
    placement = ray.get(actor.__ray_call__.remote(lambda self: self.placement), timeout=60)
    assert info.gpu_ids == ("0",) and info.device == "cpu"  # the fake GPU: the model ran on CPU ...
    assert placement.cpu_fallback and placement.cuda_visible_devices == "0"  # ... and says so
    free = ray.available_resources()
    assert free.get("GPU", 0) == 0 and free.get("CPU", 0) == WORKERS + SCORERS - GPU_ACTOR_CPUS
    # the scorer still gets its CPU: the run does not deadlock with the actor alive
    assert ray.get(ray.remote(_score_like).options(num_cpus=1).remote(), timeout=120) != info.pid
    ray.kill(actor)


def test_an_actor_on_a_gpu_without_cuda_refuses_outside_a_rehearsal() -> None:
    actor = spawn_model_actor(model_config("tiny-llama"), use_gpu=True)  # cpu_fallback defaults to False
    with pytest.raises(ray.exceptions.RayActorError) as err:
        ray.get(actor.info.remote(), timeout=300)
    assert "DeviceUnavailable" in str(err.value) and "rehearsal: true" in str(err.value)
