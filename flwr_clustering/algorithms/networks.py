"""The networks of DeepFeCA (PyTorch; imported only when DeepFeCA runs).

Every network is a backbone (whose output the linear probe reads) followed by a projection
head whose L2-normalised output is the clustering feature, as in DeepCluster-v2 (Caron et
al. 2020), the method DeepFeCA modifies (Xu et al., Sec. 5):

- ``"cnn"`` (default): three 3x3 convolutions (32, 64, 128 channels) with GroupNorm and
  ReLU, one 2x2 max-pool, global average pooling: a 128-d feature, about 0.1 M weights,
  small enough to train on two CPU cores. GroupNorm instead of BatchNorm: no running
  statistics to average and any batch size works, which suits FedAvg over small and
  non-IID clients.
- ``"resnet18"``: ResNet-18 (He et al. 2016) in its CIFAR form (3x3 stem, no max-pool;
  BatchNorm), a 512-d feature, about 11 M weights: the paper's network. Written here
  because torchvision does not install beside the CPU torch of this project.
- ``"mlp"``: two 128-unit ReLU layers, for tabular data (any number of features).

The projection head is SwAV's and DeepCluster-v2's, ``Linear(f, f) - BatchNorm - ReLU -
Linear(f, proj_dim)``: the BatchNorm centres it, without which the normalised outputs of a
random ReLU network all point the same way (mean cosine 0.99 on digits) and training
collapses to one cluster.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["BasicBlock", "DeepClusterNet", "build_backbone"]


def _conv_gn(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(8, cout), nn.ReLU()]


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with BatchNorm and a shortcut.

    Parameters
    ----------
    cin, cout : int
        Input and output channels.
    stride : int
        Stride of the first convolution (and of the projection shortcut).
    """

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``."""
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def _resnet18(channels: int) -> tuple[nn.Module, int]:
    layers: list[nn.Module] = [nn.Conv2d(channels, 64, 3, padding=1, bias=False),
                               nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers), 512


def build_backbone(name: str, input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    """Return ``(backbone, feature dimension)`` of network ``name``.

    Parameters
    ----------
    name : {"cnn", "resnet18", "mlp"}
        The network.
    input_shape : tuple of int
        ``(channels, height, width)`` for the convolutional networks, ``(d,)`` for the MLP.

    Returns
    -------
    tuple
        The backbone module and the size of its output.

    Raises
    ------
    ValueError
        On an unknown name or an input shape of the wrong rank.
    """
    if name in ("cnn", "resnet18"):
        if len(input_shape) != 3:
            raise ValueError(f"network {name!r} needs an input shape (channels, height, width), "
                             f"got {input_shape}")
        channels = int(input_shape[0])
        if name == "resnet18":
            return _resnet18(channels)
        layers = [*_conv_gn(channels, 32), *_conv_gn(32, 64), nn.MaxPool2d(2, ceil_mode=True),
                  *_conv_gn(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        return nn.Sequential(*layers), 128
    if name == "mlp":
        if len(input_shape) != 1:
            raise ValueError(f"network 'mlp' needs an input shape (d,), got {input_shape}")
        d = int(input_shape[0])
        return nn.Sequential(nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU()), 128
    raise ValueError(f"unknown network {name!r}; choose 'cnn', 'resnet18' or 'mlp'")


class DeepClusterNet(nn.Module):
    """Backbone plus projection head (DeepCluster-v2's model without its prototypes).

    The prototypes (the classifier over clusters) are not a parameter: DeepFeCA sets them
    from the round's aggregated centroids (see
    :func:`flwr_clustering.algorithms.deepfeca.local_train`), so only the backbone and the
    head are trained and averaged.

    Parameters
    ----------
    name : {"cnn", "resnet18", "mlp"}
        The backbone.
    input_shape : tuple of int
        Shape of one input (see :func:`build_backbone`).
    proj_dim : int
        Dimension of the clustering feature.
    """

    def __init__(self, name: str, input_shape: tuple[int, ...], proj_dim: int) -> None:
        super().__init__()
        self.input_shape = tuple(int(s) for s in input_shape)
        self.backbone, width = build_backbone(name, self.input_shape)
        self.head = nn.Sequential(nn.Linear(width, width, bias=False), nn.BatchNorm1d(width),
                                  nn.ReLU(), nn.Linear(width, proj_dim))
        self.n_inputs = math.prod(self.input_shape)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone output (what the linear probe reads)."""
        return self.backbone(x.reshape(-1, *self.input_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """L2-normalised projection: the clustering feature."""
        return nn.functional.normalize(self.head(self.features(x)), dim=1)
