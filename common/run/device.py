"""Paddle import guard and device selection."""

from __future__ import annotations

#: the oldest Paddle this project runs on (setup.py's ``cpu`` extra asks for the same; CI tests 2.6.2)
MIN_PADDLE = (2, 6)


def paddle_version_ok(version: str) -> bool:
    """Whether a ``paddle.__version__`` string is ``MIN_PADDLE`` or newer. Paddle's source builds
    report ``0.0.0`` and pass (they are built from a current branch)."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return True  # a version string this check cannot read is not refused on its account
    return (major, minor) == (0, 0) or (major, minor) >= MIN_PADDLE


def require_paddle():
    """Import Paddle, or fail with the install command (Paddle is not a hard dependency, see setup.py);
    fail too on a Paddle older than ``MIN_PADDLE``, naming the version found."""
    import warnings

    # Paddle warns about a missing C++ compiler cache on every import; it only matters for custom ops.
    warnings.filterwarnings("ignore", message="No ccache found")
    try:
        import paddle  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise SystemExit(
            'PaddlePaddle is not installed. CPU: pip install -e ".[cpu]"; '
            "GPU: install paddlepaddle-gpu for your CUDA version (see README)"
        ) from e
    if not paddle_version_ok(paddle.__version__):
        need = ".".join(map(str, MIN_PADDLE))
        raise SystemExit(
            f"PaddlePaddle {paddle.__version__} is installed; this project needs {need} or newer. "
            f'CPU: pip install -e ".[cpu]"; GPU: upgrade paddlepaddle-gpu for your CUDA version'
        )
    return paddle


def set_device(device: str) -> str:
    """``cpu`` or ``gpu``; a clear error when a GPU is asked for but unavailable."""
    paddle = require_paddle()
    if device == "gpu":
        if not paddle.device.is_compiled_with_cuda():
            raise SystemExit("--device gpu needs paddlepaddle-gpu (this Paddle is the CPU build); use --device cpu")
        if paddle.device.cuda.device_count() < 1:
            raise SystemExit("--device gpu: paddlepaddle-gpu is installed but no CUDA device is visible")
        paddle.set_device("gpu")
    elif device == "cpu":
        paddle.set_device("cpu")
    else:
        raise SystemExit(f"--device {device!r}: expected cpu or gpu")
    return device


def host_floats(tensors) -> list[float]:
    """The values of 0-D (or one-element) float tensors as Python floats, copied to the host in one
    transfer: on a GPU each ``float(t)`` would wait for the device on its own."""
    import paddle

    return paddle.stack([t.detach().reshape([]).astype("float32") for t in tensors]).numpy().tolist()


#: the flags that tune only the CPU speed paths (``common.cpu``)
CPU_ONLY_FLAGS = ("num_threads", "inference")


def warn_ignored_cpu_flags(cfg) -> list[str]:
    """Where the CPU speed paths are off (``--device gpu``, or ``PADDLE_CURIOSITY_PLAIN=1``), warn once
    for each CPU-only flag (``CPU_ONLY_FLAGS``) set away from its default: the run ignores it. Returns
    the flags."""
    import dataclasses
    import warnings

    from common import cpu
    from common.run.config import flag_name

    if cpu.fast_paths():
        return []
    where = f"--device {cfg.device}" if cfg.device != "cpu" else "PADDLE_CURIOSITY_PLAIN=1"
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    ignored = [name for name in CPU_ONLY_FLAGS if name in defaults and getattr(cfg, name) != defaults[name]]
    for name in ignored:
        warnings.warn(
            f"--{flag_name(name)} {getattr(cfg, name)!r} tunes the CPU speed paths, which are off with "
            f"{where}; this run ignores it (docs/gpu.md)",
            stacklevel=2,
        )
    return ignored
