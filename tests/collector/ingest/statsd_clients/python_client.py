"""Debian's python3-statsd against the collector: what a Python service sends, as it sends it.

Usage: python_client.py PORT. Every call below has a known result in /metrics, checked exactly by
statsd_clients_e2e_test.cc. Sample rate 1 everywhere: the client drops sampled calls at random.
"""
import socket
import sys

import statsd

port = int(sys.argv[1])
c = statsd.StatsClient("127.0.0.1", port, prefix="py")
c.incr("requests")          # py.requests:1|c
c.incr("requests", 4)       # py.requests:4|c
c.decr("requests")          # py.requests:-1|c  (a negative counter: refused, bad_value)
c.gauge("queue", 10)        # py.queue:10|g
c.gauge("queue", 3, delta=True)    # py.queue:+3|g
c.gauge("queue", -5, delta=True)   # py.queue:-5|g   -> 8
c.gauge("temp", -4)         # py.temp:0|g and py.temp:-4|g in one datagram -> -4
for user in ("alice", "bob", "alice", "carol"):
    c.set("users", user)    # py.users:alice|s ... -> 3 distinct
c.timing("latency", 250)    # py.latency:250.000000|ms -> 0.25 s
c.timing("latency", 750)
with c.pipeline() as pipe:  # one datagram, several lines
    pipe.incr("batched", 2)
    pipe.set("users", "dave")      # -> 4 distinct
    pipe.gauge("queue", 1, delta=True)  # -> 9

# Tag styles python-statsd has no API for, sent the way their clients write them.
raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for line in (
    "py.librato#env=prod,host=h1:5|c",
    "py.influx,env=prod,host=h2:6|c",
    "py.signalfx[env=prod,host=h3].count:7|c",
):
    raw.sendto(line.encode(), ("127.0.0.1", port))
print("sent")
