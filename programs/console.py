"""What the programs print: a progress bar, warnings and a final summary; the rest goes to a log file.

    from programs import console
    console.quiet_tensorflow_start()   # first, before anything imports TensorFlow
    ...
    console.log_to(output_dir)         # in main(), once the results folder is known

`quiet_tensorflow_start` silences TensorFlow's C++ start-up noise, unless the user set
TF_CPP_MIN_LOG_LEVEL (then nothing is changed): C++ INFO and WARNING lines are dropped for the
whole run (TF_CPP_MIN_LOG_LEVEL=2), and of the ERROR lines printed while TensorFlow Federated is
imported only the known harmless ones (`KNOWN_NOISE`: TensorFlow and jaxlib each register the CUDA
plugins, the second registration is refused) are dropped. Level 3 would silence those too, but
also every C++ error of the run (a CUDA library that does not load, a worker that fails), which a
user needs to see.

`log_to` sends absl logging (INFO and above: TFF's release managers, TensorFlow's SavedModel
writes, this project's own) to OUTPUT_DIR/log.txt, appended across resumes; warnings and errors
go to stderr as well (absl's --stderrthreshold, unless given on the command line).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

LOG_NAME = "log.txt"
# ERROR lines of TensorFlow's C++ at import that say nothing about this run.
KNOWN_NOISE = re.compile(rb"Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register factory for plugin")


# Set beside TF_CPP_MIN_LOG_LEVEL by quiet_tensorflow_start: a process it spawns (the data
# generator's workers) inherits the level, and this says the level is ours, not the user's, so the
# child drops the same start-up noise.
SET_BY_US = "TFF_RADIOMAP_QUIET_TF"


def quiet_tensorflow_start() -> None:
    """Call before TensorFlow is imported: see the module docstring."""
    user_level = "TF_CPP_MIN_LOG_LEVEL" in os.environ and os.environ.get(SET_BY_US) != "1"
    if user_level or "tensorflow" in sys.modules:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ[SET_BY_US] = "1"
    with _stderr_without(KNOWN_NOISE):
        import tensorflow_federated  # noqa: F401  (imports TensorFlow and jax)


@contextlib.contextmanager
def _stderr_without(pattern: re.Pattern):
    """Holds back what is written to file descriptor 2 (C++ included), then writes it out without
    the lines matching `pattern`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held if not pattern.search(line))
            if kept:
                sys.stderr.buffer.write(kept)
                sys.stderr.flush()


def log_to(output_dir: str) -> str:
    """Sends absl (and TensorFlow's Python) logging to OUTPUT_DIR/log.txt; returns its path."""
    import logging as py_logging

    from absl import flags, logging

    path = os.path.join(output_dir, LOG_NAME)
    handler = logging.get_absl_handler().python_handler
    old = handler.setStream(open(path, "a", encoding="utf-8"))  # noqa: SIM115 (open for the run)
    if old not in (None, sys.stderr, sys.__stderr__):
        old.close()
    if not flags.FLAGS["stderrthreshold"].present:
        flags.FLAGS.stderrthreshold = "warning"
    # TensorFlow adds a stderr handler of its own when it is imported before absl's is installed.
    tf_logger = py_logging.getLogger("tensorflow")
    for h in list(tf_logger.handlers):
        if isinstance(h, py_logging.StreamHandler) and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__):
            tf_logger.removeHandler(h)
    tf_logger.propagate = True
    return path
