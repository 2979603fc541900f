"""ViT, a vision encoder, under transformers' common model tests (ModelTesterMixin), with a tiny random config."""
import unittest

from transformers import ViTConfig, ViTForImageClassification, ViTForMaskedImageModeling, ViTModel

from ...test_modeling_common import ModelTesterMixin, floats_tensor


class ViTTester:
    batch_size, image_size, patch_size, num_channels = 3, 16, 4, 3
    hidden_size, num_hidden_layers, num_attention_heads = 32, 2, 4
    seq_length = (16 // 4) ** 2 + 1  # the patches and the [CLS] token
    mask_length = seq_length - 1  # ViTForMaskedImageModeling masks patches, not the [CLS] token
    num_masks = 8
    is_training = True

    def __init__(self, parent):
        self.parent = parent

    def get_config(self):
        return ViTConfig(image_size=self.image_size, patch_size=self.patch_size, num_channels=self.num_channels,
                         hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
                         num_attention_heads=self.num_attention_heads, intermediate_size=37,
                         encoder_stride=self.patch_size, num_labels=3)

    def prepare_config_and_inputs_for_common(self):
        pixels = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        return self.get_config(), {"pixel_values": pixels}


class ViTModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (ViTModel, ViTForImageClassification, ViTForMaskedImageModeling)
    # Vision models have no token embeddings to resize.
    test_resize_embeddings = False

    def setUp(self):
        self.model_tester = ViTTester(self)
