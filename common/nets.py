"""One style for every network: the dataflow written once, in ``compute(x, run)``.

``Net.forward(x)`` is ``self.compute(x, common.cpu.run)``: training runs each layer (or
list / ``nn.Sequential`` of layers) through the CPU runner, which fuses Conv2D + ReLU or
LeakyReLU runs and shards large batches over threads (``common.cpu``; plain Paddle layers
on GPU). Collection engines run the same ``compute`` with their own ``run``
(``common.cpu.native`` on numpy + oneDNN primitives), so a network is written once and
every engine computes the same function. ``run(layer, x)`` accepts a layer, an
``nn.Sequential``, or a list of layers held in a plain attribute (not registered as a
sublayer, so parameter names stay those of the layers' owner).

A layer that the native engine cannot know (e.g. gridworld's one-hot decoder) may define
``forward_numpy(a: np.ndarray) -> np.ndarray`` on NCHW arrays; the engine then calls it.
"""

from __future__ import annotations

import paddle.nn as nn

from common import cpu


class Net(nn.Layer):
    """Subclasses build their layers in ``__init__`` and write ``compute(x, run)``."""

    def forward(self, x):
        return self.compute(x, cpu.run)

    def compute(self, x, run):
        """The network's function, with every layer applied as ``run(layer, x)``."""
        raise NotImplementedError
