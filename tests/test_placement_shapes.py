"""The placement benchmark's job shapes (benchmarks/placement/jobs.py): what each job of the stream
is submitted as. That Kueue, the JobSet controller and KWOK run a JobSet of this shape to
completion is checked on the real cluster (e2e/test_jobset_controller.py)."""

from __future__ import annotations

from benchmarks.placement.jobs import DRIVER_PORT, LOCAL_QUEUE, QUEUE_LABEL, job_jobset, job_pods
from benchmarks.placement.stream import Job


def test_a_jobset_has_a_driver_job_of_one_pod_and_a_workers_job_of_the_rest() -> None:
    jobset = job_jobset(Job(index=7, arrival=3.5, runtime=42, gpus_per_pod=8, workers=3))
    assert (jobset["apiVersion"], jobset["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobset["metadata"] == {"name": "job-0007", "namespace": "bench", "labels": {QUEUE_LABEL: LOCAL_QUEUE}}
    driver, workers = jobset["spec"]["replicatedJobs"]
    assert (driver["name"], driver["replicas"]) == ("driver", 1)
    assert (workers["name"], workers["replicas"]) == ("workers", 1)
    assert (driver["template"]["spec"]["parallelism"], driver["template"]["spec"]["completions"]) == (1, 1)
    assert (workers["template"]["spec"]["parallelism"], workers["template"]["spec"]["completions"]) == (3, 3)
    for replicated in (driver, workers):
        pod = replicated["template"]["spec"]["template"]
        assert pod["metadata"]["annotations"] == {
            "pod-complete.stage.kwok.x-k8s.io/delay": "42s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "42s",
        }
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["requests"] == {"cpu": "32", "nvidia.com/gpu": "8"}
        assert pod["spec"]["restartPolicy"] == "Never"
    driver_container = driver["template"]["spec"]["template"]["spec"]["containers"][0]
    assert driver_container["ports"] == [{"containerPort": DRIVER_PORT, "name": "master"}]
    assert "ports" not in workers["template"]["spec"]["template"]["spec"]["containers"][0]


def test_a_jobset_carries_what_the_unregistered_defaulting_webhook_would_set() -> None:
    spec = job_jobset(Job(index=1, arrival=0.0, runtime=15, gpus_per_pod=2, workers=1))["spec"]
    # JobSet v0.12.0 pkg/webhooks/jobset_webhook.go Default()
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert set(spec["network"]) == {"enableDNSHostnames", "publishNotReadyAddresses"}
    assert all(r["template"]["spec"]["completionMode"] == "Indexed" for r in spec["replicatedJobs"])


def test_a_one_pod_job_is_its_driver_alone() -> None:
    jobset = job_jobset(Job(index=2, arrival=0.0, runtime=15, gpus_per_pod=8, workers=0))
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["driver"]
    assert len(job_pods(Job(index=2, arrival=0.0, runtime=15, gpus_per_pod=8, workers=0))) == 1


def test_a_pod_group_is_a_driver_pod_and_its_workers() -> None:
    pods = job_pods(Job(index=3, arrival=0.0, runtime=20, gpus_per_pod=4, workers=1))
    assert [p["metadata"]["name"] for p in pods] == ["job-0003-driver", "job-0003-worker-1"]
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in pods} == {"job-0003"}
    assert {p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] for p in pods} == {"2"}
