"""Mixtral, a mixture of experts, under transformers' common model tests (ModelTesterMixin), with a tiny random
config: 4 experts, 2 per token."""
import unittest

import torch
from transformers import (MixtralConfig, MixtralForCausalLM, MixtralForQuestionAnswering,
                          MixtralForSequenceClassification, MixtralForTokenClassification, MixtralModel)

from ...test_modeling_common import ModelTesterMixin, ids_tensor


class MixtralTester:
    batch_size, seq_length, vocab_size = 3, 7, 99
    hidden_size, num_hidden_layers, num_attention_heads = 32, 2, 4
    is_training = True
    pad_token_id = 0

    def __init__(self, parent):
        self.parent = parent

    def get_config(self):
        # The experts' width a multiple of 16 bytes: transformers' grouped-matmul experts (torch._grouped_mm) need it.
        return MixtralConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=32,
                             num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
                             num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
                             max_position_embeddings=512, pad_token_id=self.pad_token_id)

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = torch.tril(torch.ones_like(input_ids))
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class MixtralModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (MixtralModel, MixtralForCausalLM, MixtralForSequenceClassification,
                         MixtralForQuestionAnswering, MixtralForTokenClassification)
    # Experts no token was routed to get no gradient in a training step.
    test_all_params_have_gradient = False

    def setUp(self):
        self.model_tester = MixtralTester(self)
