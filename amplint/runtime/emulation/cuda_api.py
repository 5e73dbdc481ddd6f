"""The `torch.cuda` and `torch.accelerator` a CUDA script talks to under CPU emulation.

The machine answers as a CUDA machine with one device per local rank (torchrun's
`LOCAL_WORLD_SIZE`, else one), so `"cuda" if torch.cuda.is_available() else "cpu"` and
"is there a GPU for every rank?" checks take the path the script was written for.  What each
answer is:

- devices: `is_available()` True, `device_count()` the local ranks, `current_device()` the last
  `set_device(...)`; `get_device_name()` "CPU (amplint emulation)", capability (8, 0) (so bf16
  checks pass), `get_device_properties()` the host's memory and cores;
- streams and events: CPU work is synchronous, so every `wait_stream`/`wait_event`/`synchronize`
  is already satisfied and `query()` is True; `Event.elapsed_time` measures host wall time;
- memory: nothing is allocated on a GPU, so `memory_allocated()` and its peers are 0 and
  `mem_get_info()` is the host's free and total memory;
- `torch.cuda.nvtx` ranges do nothing; `manual_seed` and the RNG-state calls do nothing (the
  CPU generator is the one in use).

Only the script (and the libraries it uses) get these answers: a call from inside torch itself gets
the real one, so torch never takes a CUDA path for CPU tensors (the optimizer's graph-capture check,
DataLoader's pinning thread, checkpoint's default device all ask `torch.accelerator`).

Not here (NB): `tensor.is_cuda` and `tensor.device.type` stay "cpu" (real tensors cannot lie), CUDA
graphs, and kernels of CUDA-only extensions.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from amplint.runtime.patching import Patch

DEVICE_NAME = "CPU (amplint emulation)"
CAPABILITY = (8, 0)


def emulated_device_count() -> int:
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory; (0, 0) where the OS does not say."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0


@dataclass(frozen=True)
class EmulatedDeviceProperties:
    """What `torch.cuda.get_device_properties()` returns under emulation (the common fields)."""

    name: str = DEVICE_NAME
    major: int = CAPABILITY[0]
    minor: int = CAPABILITY[1]
    total_memory: int = 0
    multi_processor_count: int = 1
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    warp_size: int = 32
    L2_cache_size: int = 0


class EmulatedEvent:
    """Stands in for `torch.cuda.Event`: recorded at once; timing is host wall time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **_: Any) -> None:
        self.enable_timing = enable_timing
        self._at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: "EmulatedEvent") -> float:
        if self._at is None or end_event._at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._at - self._at) * 1000.0


class EmulatedStream:
    """Stands in for `torch.cuda.Stream`: everything already ran, in order, on the host."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device = torch.device("cpu")
        self.priority = priority
        self.cuda_stream = 0

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: EmulatedEvent | None = None) -> EmulatedEvent:
        event = event or EmulatedEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> "EmulatedStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class _Devices:
    """The emulated device index that `set_device` / `current_device` agree on."""

    def __init__(self) -> None:
        self.index = 0

    def set(self, device: Any) -> None:
        if isinstance(device, int) and not isinstance(device, bool):
            self.index = device
        elif isinstance(device, str) and device.startswith("cuda:"):
            self.index = int(device.split(":", 1)[1] or 0)
        elif isinstance(device, torch.device) and device.index is not None:
            self.index = device.index


# NB: a fresh function per patched name: torch._dynamo indexes torch's functions by identity and
# refuses one object under two names ("Duplicate torch object ... with different rules").
def _null_context() -> Callable[..., contextlib.AbstractContextManager]:
    return lambda *args, **kwargs: contextlib.nullcontext(args[0] if args else None)


def _zero() -> Callable[..., int]:
    return lambda *args, **kwargs: 0


def _nothing() -> Callable[..., None]:
    return lambda *args, **kwargs: None


_MEMORY_ZERO = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                "memory_cached", "max_memory_cached")
_MEMORY_NOOP = ("empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated",
                "reset_max_memory_cached", "reset_accumulated_memory_stats", "empty_host_cache")


_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep


def fake(owner: Any, name: str, answer: Callable) -> Patch:
    """Patch `owner.name` so the script gets `answer` and torch's own code the original."""
    original = getattr(owner, name, None)
    if original is None or isinstance(original, type):
        return Patch(owner, name, answer)

    def for_the_script(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_code.co_filename
        if caller.startswith(_TORCH_DIR):
            return original(*args, **kwargs)
        return answer(*args, **kwargs)

    for_the_script.__wrapped__ = original  # type: ignore[attr-defined]
    return Patch(owner, name, for_the_script)


def _memory_api(owner: Any, info_name: str) -> Iterator[Patch]:
    for name in _MEMORY_ZERO:
        if hasattr(owner, name):
            yield fake(owner, name, _zero())
    for name in _MEMORY_NOOP:
        if hasattr(owner, name):
            yield fake(owner, name, _nothing())
    if hasattr(owner, "memory_stats"):
        yield fake(owner, "memory_stats", lambda *a, **k: collections.defaultdict(int))
    if hasattr(owner, info_name):
        yield fake(owner, info_name, lambda *a, **k: _host_memory())


def install() -> Iterator[Any]:
    """Yield one handle per patch of `torch.cuda`, `torch.cuda.memory`, `torch.accelerator`."""
    cuda = torch.cuda
    devices = _Devices()
    free, total = _host_memory()
    props = EmulatedDeviceProperties(total_memory=total, multi_processor_count=os.cpu_count() or 1)
    default_stream = EmulatedStream()

    yield fake(cuda, "is_available", lambda: True)
    yield fake(cuda, "is_initialized", lambda: True)
    yield fake(cuda, "device_count", lambda: emulated_device_count())
    yield fake(cuda, "current_device", lambda: devices.index)
    yield fake(cuda, "set_device", lambda device: devices.set(device))
    yield fake(cuda, "is_bf16_supported", lambda *a, **k: True)
    yield fake(cuda, "get_device_name", lambda *a, **k: DEVICE_NAME)
    yield fake(cuda, "get_device_capability", lambda *a, **k: CAPABILITY)
    yield fake(cuda, "get_device_properties", lambda *a, **k: props)
    yield fake(cuda, "get_arch_list", lambda: [])
    for name in ("synchronize", "init", "ipc_collect", "manual_seed", "manual_seed_all", "seed", "seed_all",
                 "set_rng_state", "set_rng_state_all", "set_stream", "set_sync_debug_mode"):
        yield fake(cuda, name, _nothing())
    yield fake(cuda, "get_rng_state", lambda *a, **k: torch.get_rng_state())
    yield fake(cuda, "get_rng_state_all", lambda: [torch.get_rng_state()])
    yield fake(cuda, "initial_seed", lambda: torch.initial_seed())
    yield fake(cuda, "utilization", _zero())
    yield from _memory_api(cuda, "mem_get_info")
    yield from _memory_api(cuda.memory, "mem_get_info")
    yield fake(cuda, "memory_summary", lambda *a, **k: f"{DEVICE_NAME}: no CUDA memory is used")

    yield fake(cuda, "Stream", EmulatedStream)
    yield fake(cuda, "Event", EmulatedEvent)
    yield fake(cuda.streams, "Stream", EmulatedStream)
    yield fake(cuda.streams, "Event", EmulatedEvent)
    yield fake(cuda, "current_stream", lambda *a, **k: default_stream)
    yield fake(cuda, "default_stream", lambda *a, **k: default_stream)
    yield fake(cuda, "stream", _null_context())
    yield fake(cuda, "device", _null_context())
    yield fake(cuda, "device_of", _null_context())
    for name in ("range_push", "range_pop", "mark"):
        yield fake(cuda.nvtx, name, _nothing())
    yield fake(cuda.nvtx, "range", _null_context())

    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    yield fake(acc, "is_available", lambda: True)
    yield fake(acc, "device_count", lambda: emulated_device_count())
    yield fake(acc, "current_accelerator", lambda check_available=False: torch.device("cuda"))
    for name in ("current_device_index", "current_device_idx"):
        if hasattr(acc, name):
            yield fake(acc, name, lambda: devices.index)
    for name in ("set_device_index", "set_device_idx"):
        if hasattr(acc, name):
            yield fake(acc, name, lambda device: devices.set(device))
    for name in ("synchronize", "set_stream"):
        if hasattr(acc, name):
            yield fake(acc, name, _nothing())
    if hasattr(acc, "current_stream"):
        yield fake(acc, "current_stream", lambda *a, **k: default_stream)
    if hasattr(acc, "device_index"):
        yield fake(acc, "device_index", _null_context())
    if hasattr(acc, "get_device_capability"):
        yield fake(acc, "get_device_capability", lambda *a, **k: {"major": CAPABILITY[0], "minor": CAPABILITY[1]})
    yield from _memory_api(acc, "get_memory_info")
    if hasattr(acc, "memory"):
        yield from _memory_api(acc.memory, "get_memory_info")
