"""Forward-only copies of a network run by Paddle Inference with oneDNN (CPU collection).

Paddle's dygraph runs CPU convolutions with its own per-sample im2col + GEMM kernels; the
oneDNN kernels compiled into the same wheel are only selected by Paddle Inference. For the
policy's forward pass during collection (no gradients) a predictor built from the same
weights fuses the whole network (convolutions, linear layers, the input scaling) on oneDNN,
with outputs equal to the dygraph network's within ~1e-6 (``tests/test_inference.py``).
It was faster than Paddle's own kernels at large batches; since the dygraph convolutions run
on oneDNN too (``common/cpu/onednn.py``) the fp32 predictor is no faster than the training
network, and only the bf16 predictor (opt-in, not exact) is (``benchmarks/inference.py``,
docs/performance.md).

``InferenceEngine(net, obs_shape)`` exports ``net(unit_floats(x))`` once (``paddle.jit.save``
of the static graph; ``common.cpu.fused`` falls back to the plain layers when traced) and
``refresh()`` builds a predictor with the current weights (one parameter file write + a new
predictor, timed in docs/performance.md; ``PPO`` calls it on first use after an update, a
first call without one builds it). ``engine(x)``
takes ``uint8[B, C, H, W]`` observations, as the rollout stores them, and returns the
network's outputs as float32 numpy arrays. One thread: collection runs it while the env
workers hold the cores.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

import numpy as np
import paddle
import paddle.nn as nn

_PREFIX = "net"
PRECISIONS = ("fp32", "bf16")


def onednn_available() -> bool:
    """True when this Paddle can run the oneDNN predictor (a CPU build with oneDNN and Paddle Inference,
    and the parameter-file writer of Paddle 3's PIR, which ``refresh`` uses: not Paddle 2.6)."""
    try:
        from paddle import inference  # noqa: F401
    except ImportError:
        return False
    if not hasattr(paddle.base.libpaddle, "save_combine_func"):
        return False
    return bool(
        paddle.is_compiled_with_onednn()
        if hasattr(paddle, "is_compiled_with_onednn")
        else paddle.base.core.is_compiled_with_mkldnn()
    )


@contextlib.contextmanager
def _native_stderr_to(path: str):
    """Send C++-level stderr (glog) to ``path`` for the block: the exporter logs a harmless
    "PIR not support input out tensor" warning for every tensor add it traces."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "w") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


class _ObsInput(nn.Layer):
    """uint8 observations -> ``net(x / 255)``: ``common.cpu.unit_floats`` inside the graph."""

    def __init__(self, net: nn.Layer):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x.astype("float32") / 255.0)


class InferenceEngine:
    """A oneDNN predictor with ``net``'s current weights; ``engine(uint8[B, *obs_shape])`` -> outputs.

    Args:
        net: the ``nn.Layer`` to copy (its forward takes float32 in [0, 1]).
        obs_shape: (C, H, W) of one observation.
        threads: oneDNN threads (1: collection shares the cores with the env workers).
        precision: "fp32" (outputs equal to the network's within ~1e-6) or "bf16" (bfloat16 convolutions
            and matrix products on CPUs with AVX512-BF16/AMX: outputs within ~1e-3; opt-in).
    """

    #: batches smaller than this stay on the training network: with the convolutions on oneDNN
    #: (``common.cpu.onednn``) the dygraph forward is as fast there, and the predictor costs a
    #: refresh per update (``benchmarks/inference.py``, docs/performance.md)
    min_batch = 32

    def __init__(self, net: nn.Layer, obs_shape, threads: int = 1, precision: str = "fp32"):
        self.dir = self.predictor = None
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if not onednn_available():
            raise RuntimeError("InferenceEngine needs a CPU Paddle built with oneDNN and Paddle Inference")
        from paddle.static import InputSpec

        self.threads, self.precision = int(threads), precision
        self.dir = tempfile.mkdtemp(prefix="onednn-net-")
        prefix = os.path.join(self.dir, _PREFIX)
        was_training = net.training
        net.eval()
        log = os.path.join(self.dir, "export.log")
        try:
            with _native_stderr_to(log):
                paddle.jit.save(_ObsInput(net), prefix, input_spec=[InputSpec([None, *obs_shape], "uint8", "obs")])
        except Exception:
            with open(log) as f:
                sys.stderr.write(f.read())  # whatever Paddle logged, next to the exception
            raise
        finally:
            if was_training:  # Paddle 2.6's Layer.train() takes no mode argument
                net.train()
        model_files = [f for f in os.listdir(self.dir) if f.startswith(_PREFIX + ".") and not f.endswith("params")]
        self.model_path = os.path.join(self.dir, sorted(model_files)[0])  # net.json (PIR) or net.pdmodel
        self.params_path = prefix + ".pdiparams"
        # The parameter file holds the persistable tensors sorted by name (paddle.static.pir_io.save_vars_pir);
        # the exported graph keeps the dygraph parameters' names.
        params = {p.name: p for p in net.parameters()}
        params.update({b.name: b for b in net.buffers() if b.persistable})
        self._names = sorted(params)
        self._tensors = [params[n] for n in self._names]  # the predictor is built by the first refresh()

    def refresh(self) -> None:
        """Copy the network's current weights into a new predictor (call after every weight change)."""
        from paddle import inference

        paddle.base.core.save_combine_func(
            [t.value().get_tensor() for t in self._tensors], self._names, self.params_path, True, False, False
        )
        config = inference.Config(self.model_path, self.params_path)
        config.disable_gpu()
        config.enable_mkldnn()
        if self.precision == "bf16":
            config.enable_mkldnn_bfloat16()
        config.set_cpu_math_library_num_threads(self.threads)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)
        self._input = self.predictor.get_input_handle(self.predictor.get_input_names()[0])
        self._outputs = [self.predictor.get_output_handle(n) for n in self.predictor.get_output_names()]

    def __call__(self, obs: np.ndarray) -> list[np.ndarray]:
        """uint8[B, C, H, W] -> the network's outputs, float32 numpy arrays in its return order."""
        if self.predictor is None:
            self.refresh()
        obs = np.ascontiguousarray(obs, dtype=np.uint8)
        self._input.reshape(list(obs.shape))
        self._input.copy_from_cpu(obs)
        self.predictor.run()
        return [o.copy_to_cpu() for o in self._outputs]

    def close(self) -> None:
        self.predictor = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __del__(self):
        self.close()
