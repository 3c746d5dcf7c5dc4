"""Federated radio-map learning and its privacy defenses on TensorFlow Federated 0.87.

Importing the package registers the exit hook that stops TFF's own local worker and releases its
service manager before interpreter teardown (`runtime.tff_exit`); it imports nothing heavy.
"""

from tff_radiomap.runtime import tff_exit as _tff_exit

_tff_exit.release_at_exit()
