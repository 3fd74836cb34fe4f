"""What the discovery e2e jobs do besides talking: kernel signals the probes count.

Each call moves the process to another allowed CPU (a task migration) and maps, touches and
unmaps 2 MiB (a TLB flush), so every rank produces migrations and TLB flushes however idle the
machine is. Shared by ddp_job.py and mpi_job.py."""
import mmap
import os
import time

_CPUS = sorted(os.sched_getaffinity(0))


def churn(step):
    if len(_CPUS) > 1:
        os.sched_setaffinity(0, {_CPUS[step % len(_CPUS)]})
    m = mmap.mmap(-1, 2 << 20)
    for off in range(0, len(m), 4096):
        m[off] = 1
    m.close()


def write_identity(out, name, rank, job):
    """Atomically writes "RANK JOB PID" to out/name, which the test waits for."""
    tmp = os.path.join(out, "." + name)
    with open(tmp, "w") as f:
        f.write("%d %s %d\n" % (rank, job, os.getpid()))
    os.rename(tmp, os.path.join(out, name))


def should_stop(out, started, max_seconds):
    return os.path.exists(os.path.join(out, "stop")) or time.monotonic() - started > max_seconds
