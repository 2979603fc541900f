"""UNet2DConditionModel (Stable Diffusion's UNet): cross-attention down and up blocks, tiny and random."""
import unittest

import torch
from diffusers import UNet2DConditionModel

from ..testing_utils import floats_tensor, torch_device
from ._mixin import ModelChecksMixin


class UNet2DConditionModelTests(ModelChecksMixin, unittest.TestCase):
    model_class = UNet2DConditionModel

    def init_args_and_inputs(self):
        kwargs = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(4, 8),
                      norm_num_groups=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                      up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=8,
                      attention_head_dim=2)
        inputs = {"sample": floats_tensor((2, 4, 16, 16)).to(torch_device),
                  "timestep": torch.tensor([10], device=torch_device),
                  "encoder_hidden_states": floats_tensor((2, 4, 8)).to(torch_device)}
        return kwargs, inputs
