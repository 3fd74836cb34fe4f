#!/usr/bin/python3
"""A 2-rank job for the rank-discovery e2e test, started by `mpirun -np 2`: ranks know who they
are only from Open MPI's environment, and exchange 64 KiB messages over a loopback TCP socket
(rank 0 listens on port 0 and publishes the port in OUT/mpi-port) until OUT/stop exists."""
import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_churn import churn, should_stop, write_identity  # noqa: E402

MESSAGE = 64 << 10


def recv_exactly(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise SystemExit("peer closed")
        buf += chunk
    return bytes(buf)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--max-seconds", type=float, default=60)
    a = p.parse_args()
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    write_identity(a.out, "mpi-rank%d" % rank, rank, os.environ["OMPI_MCA_ess_base_jobid"])
    port_file = os.path.join(a.out, "mpi-port")
    started = time.monotonic()
    if rank == 0:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with open(port_file + ".tmp", "w") as f:
            f.write(str(srv.getsockname()[1]))
        os.rename(port_file + ".tmp", port_file)
        conn, _ = srv.accept()
    else:
        while not os.path.exists(port_file):
            if time.monotonic() - started > a.max_seconds:
                raise SystemExit("rank 0 never published its port")
            time.sleep(0.05)
        conn = socket.create_connection(("127.0.0.1", int(open(port_file).read())))
    payload = b"x" * MESSAGE
    step = 0
    while True:
        if rank == 1:
            conn.sendall(payload)
            if recv_exactly(conn, 1) == b"s":
                break
            recv_exactly(conn, MESSAGE)
        else:
            recv_exactly(conn, MESSAGE)
            stop = should_stop(a.out, started, a.max_seconds)
            conn.sendall(b"s" if stop else b"c")
            if stop:
                break
            conn.sendall(payload)
        churn(step)
        step += 1
        time.sleep(0.005)
    conn.close()


if __name__ == "__main__":
    main()
