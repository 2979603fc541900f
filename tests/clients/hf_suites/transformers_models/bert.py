"""BERT, an encoder, under transformers' common model tests (ModelTesterMixin), with a tiny random config."""
import unittest

from transformers import (BertConfig, BertForMaskedLM, BertForMultipleChoice, BertForQuestionAnswering,
                          BertForSequenceClassification, BertForTokenClassification, BertModel)

from ...test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask


class BertTester:
    batch_size, seq_length, vocab_size = 3, 7, 99
    hidden_size, num_hidden_layers, num_attention_heads = 32, 2, 4
    num_choices = 4
    is_training = True

    def __init__(self, parent):
        self.parent = parent

    def get_config(self):
        return BertConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=37,
                          num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
                          max_position_embeddings=512, type_vocab_size=16)

    def prepare_config_and_inputs_for_common(self):
        shape = [self.batch_size, self.seq_length]
        inputs = {"input_ids": ids_tensor(shape, self.vocab_size), "token_type_ids": ids_tensor(shape, 16),
                  "attention_mask": random_attention_mask(shape)}
        return self.get_config(), inputs


class BertModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (BertModel, BertForMaskedLM, BertForMultipleChoice, BertForQuestionAnswering,
                         BertForSequenceClassification, BertForTokenClassification)

    # Offloading and model parallelism split the model at these fractions of its size; at 0.7 the embeddings (512
    # positions) fit nowhere but on the CPU, so nothing would be placed on the device.
    model_split_percents = [0.5, 0.8, 0.9]

    def setUp(self):
        self.model_tester = BertTester(self)
