"""amplint's runtime half (`verify`, `compare`): the only package that imports torch.

Layout (interception separate from judging, STYLE.md 2.8):
- `launch.py` runs the user's command with `_boot/sitecustomize.py` first on PYTHONPATH, so
  `bootstrap.py` installs itself in every Python process of the command, and merges the
  per-process evidence files; `supervise.py` runs the command as a process group that a
  timeout or a signal to verify ends whole;
- `emulation/` makes a CUDA script run on the CPU (`--device cpu`); `reach.py` tracks which
  agenda lines ran;
- `interception.py` patches torch's AMP entry points once and publishes events;
- `probes/ampNNN_*.py` subscribe to those events and record `Observation`s (they never print
  and never raise into the training loop);
- `correlate.py` turns static diagnostics x observations into verdicts with reasons; `cli.py`
  reports them; `runtime_findings.py` documents AMP9xx (torch-free, for `amplint explain`).

Nothing here is imported by `amplint check`.
"""

# What verify and compare say when torch is missing.  NB: on a machine without an NVIDIA GPU,
# `pip install amplint[runtime]` alone pulls torch's default CUDA build (several GB): the
# CPU build has to be installed first, from PyTorch's own index.
TORCH_INSTALL_HINT = (
    "torch is not installed: pip install 'amplint[runtime]' "
    "(on a machine without an NVIDIA GPU first: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)
