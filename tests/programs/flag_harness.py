"""Runs one program's main() on many argument lists in one process, stopping before any training.

    python -m tests.programs.flag_harness PROGRAM '[["--flag=v", ...], ...]'

prints a JSON list of {"code": exit code, 0, "started" or "started children", "stderr": ...}, one per
argument list.
"started" means that every check passed and the program reached the TFF runtime (or, for
make_dataset, the generator); "started children", that privacy_table or remnet_tables with
--jobs > 1 reached its child processes. All are replaced here by a stop. Program flags can be
defined once per process (absl), hence one process per program.
"""

import contextlib
import importlib
import io
import json
import sys

from absl import flags


class Started(Exception):
    pass


def _stop(*args, **kwargs):
    raise Started("started")


def _stop_children(*args, **kwargs):
    raise Started("started children")


def main(program: str, cases: list[list[str]]) -> list[dict]:
    module = importlib.import_module(f"programs.{program}")
    import tff_radiomap.runtime
    from programs import common
    from tff_radiomap.data import synthetic

    tff_radiomap.runtime.install_local_context = _stop
    if hasattr(module, "ChildRuns"):  # privacy_table --jobs > 1 starts child processes instead.
        module.ChildRuns = _stop_children
    if hasattr(module, "_run_children"):  # So does remnet_tables.
        module._run_children = _stop_children
    synthetic.generate_dataset = _stop
    results = []
    for args in cases:
        flags.FLAGS.unparse_flags()
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                module.main(common.parse_flags([program, *args]))
            code = 0
        except Started as exc:
            code = str(exc)
        except SystemExit as exc:
            code = exc.code
        results.append({"code": code, "stderr": err.getvalue()})
    return results


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
