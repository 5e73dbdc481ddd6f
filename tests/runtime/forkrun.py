"""Test helper: run many small fixture scripts under the verify bootstrap, forking from one warm
interpreter instead of paying a torch import per script (148 fixtures: minutes -> seconds).

Usage: python forkrun.py JOBS.json RESULTS.json  where JOBS is [{"script", "out", "device", "agenda"}].
The server imports torch but runs no op before forking (so no OpenMP pool is inherited); each
child sets the same AMPLINT_* variables the launcher would, starts the same bootstrap, and runs
the script as __main__.  The end-to-end tests (test_verify_runs.py) cover the real launcher path.
"""

from __future__ import annotations

import json
import os
import runpy
import sys


def child(job: dict) -> None:
    out = job["out"]
    os.makedirs(out, exist_ok=True)
    fd = os.open(os.path.join(out, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    script = os.path.realpath(job["script"])
    os.environ.update(AMPLINT_ACTIVE="1", AMPLINT_OUT=out, AMPLINT_SCRIPT=script, AMPLINT_ROOT=os.path.dirname(script))
    if job.get("device"):
        os.environ["AMPLINT_DEVICE"] = job["device"]
    if job.get("agenda"):
        os.environ["AMPLINT_AGENDA"] = job["agenda"]
    sys.argv = [script]
    sys.path[0] = os.path.dirname(script)
    from amplint.runtime import bootstrap

    bootstrap.start()
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report like the interpreter would
        sys.excepthook(*sys.exc_info())
        code = 1
    session = bootstrap.current()
    if session is not None:
        session.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    jobs = json.load(open(sys.argv[1]))
    parallel = int(os.environ.get("FORKRUN_JOBS", "2"))
    import torch  # noqa: F401
    import amplint.runtime.bootstrap  # noqa: F401
    import amplint.runtime.interception  # noqa: F401
    import amplint.runtime.probes as probes

    probes.probe_classes(nan_guard=True)
    running: dict[int, int] = {}
    results: dict[int, int] = {}
    pending = list(enumerate(jobs))
    while pending or running:
        while pending and len(running) < parallel:
            i, job = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                try:
                    child(job)
                finally:
                    os._exit(70)
            running[pid] = i
        pid, status = os.wait()
        if pid in running:
            results[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    json.dump([results[i] for i in range(len(jobs))], open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
