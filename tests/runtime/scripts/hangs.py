"""Trains one step, then hangs, with a worker process of its own also hanging.

Writes the pids of itself and its worker to argv[1] once the step is done (what a test needs to
check that nothing outlives verify).  `ignore-sigint` also ignores Ctrl-C, as a stubborn script
would, so only a harder signal ends it.
"""
import multiprocessing
import os
import signal
import sys
import time

import torch


def worker() -> None:
    while True:
        time.sleep(1)


if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    child = multiprocessing.get_context("fork").Process(target=worker, daemon=False)
    child.start()
    if "ignore-sigint" in sys.argv:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(sys.argv[1], "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}\n")
    while True:
        time.sleep(0.1)
