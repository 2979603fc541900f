"""SD3Transformer2DModel (Stable Diffusion 3's MMDiT): joint attention over image patches and text, tiny and
random."""
import unittest

import torch
from diffusers import SD3Transformer2DModel

from ..testing_utils import floats_tensor, torch_device
from ._mixin import ModelChecksMixin


class SD3Transformer2DModelTests(ModelChecksMixin, unittest.TestCase):
    model_class = SD3Transformer2DModel
    # Joint attention has no plain (matmul-softmax) processor to compare the default one with.
    test_attention_processors = None

    def init_args_and_inputs(self):
        kwargs = dict(sample_size=8, patch_size=1, in_channels=4, out_channels=4, num_layers=2,
                      attention_head_dim=8, num_attention_heads=4, joint_attention_dim=32,
                      caption_projection_dim=32, pooled_projection_dim=64, pos_embed_max_size=16)
        inputs = {"hidden_states": floats_tensor((2, 4, 8, 8)).to(torch_device),
                  "encoder_hidden_states": floats_tensor((2, 6, 32)).to(torch_device),
                  "pooled_projections": floats_tensor((2, 64)).to(torch_device),
                  "timestep": torch.tensor([10, 500], device=torch_device)}
        return kwargs, inputs
