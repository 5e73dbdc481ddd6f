"""Trains one step, then waits, with a child Python started in a session of its own
(`start_new_session=True`, as torch elastic starts binary entry points) that prints as it goes.

The command's process group does not hold the child: ended with the group, it went on printing
after verify had exited.  The child writes its pid to argv[1] once it runs.
"""
import subprocess
import sys
import time

import torch

CHILD = (
    "import os, sys, time\n"
    "open(sys.argv[1], 'w').write(f'{os.getpid()}\\n')\n"
    "while True:\n"
    "    print('child still here', flush=True)\n"
    "    time.sleep(0.2)\n"
)

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    child = subprocess.Popen([sys.executable, "-c", CHILD, sys.argv[1]], start_new_session=True)
    while True:
        time.sleep(0.1)
