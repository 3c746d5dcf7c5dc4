r"""Runs one TFF worker (`worker_binary`) in the foreground, for `--workers=host:port,...`.

  python -m programs.start_worker --port=8000

Prints the address the worker listens on, then waits. SIGTERM or SIGINT (Ctrl-C) stops the worker
and ends the program; if the worker dies, the program ends with status 1. The worker's own log
goes to --log (default: a temporary file, whose path is printed). The worker listens on all
interfaces and speaks unauthenticated, unencrypted gRPC: anyone who can reach the port can run
code in it. Start it on a private network only (see docs/runtime.md, "Several machines").
"""

import os
import signal
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from programs import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("port", None, "TCP port the worker serves gRPC on (1..65535).")
flags.DEFINE_string("log", None, "File receiving the worker's output; default: a temporary file.")


def main(argv):
    common.reject_extra_args(argv)
    common.require(FLAGS.port is not None and 0 < FLAGS.port < 65536, "port", FLAGS.port, "an integer in 1..65535")
    from tff_radiomap.runtime import workers

    stop = []
    signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    worker = workers.WorkerProcess(port=FLAGS.port, log_path=FLAGS.log)
    try:
        worker.wait_ready()
    except (RuntimeError, TimeoutError) as exc:
        worker.stop()
        common.fail(f"--port={FLAGS.port}: {exc}", code=1)
    print(f"TFF worker pid {worker.pid} listening on {socket.gethostname()}:{FLAGS.port} (all interfaces); log {worker.log_path}", flush=True)
    try:
        while not stop and worker.alive():
            time.sleep(0.2)
    finally:
        died = not worker.alive() and not stop
        worker.stop()
    if died:
        print(f"error: the TFF worker (pid {worker.pid}) died; see {worker.log_path}", file=sys.stderr)
        sys.exit(1)
    print(f"stopped (signal {stop[0]})", flush=True)


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
