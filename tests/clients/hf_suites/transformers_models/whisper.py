"""Whisper, a speech encoder-decoder, under transformers' common model tests (ModelTesterMixin), with a tiny random
config: 80 mel bins over 60 frames (30 encoder positions after the strided convolution)."""
import unittest

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration, WhisperModel

from ...test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor


class WhisperTester:
    batch_size, num_mel_bins, vocab_size = 3, 80, 200
    hidden_size, num_hidden_layers, num_attention_heads = 16, 2, 4
    seq_length = 60  # input frames
    encoder_seq_length = key_length = 30
    decoder_seq_length = 7
    is_training = True

    def __init__(self, parent):
        self.parent = parent

    def get_config(self):
        return WhisperConfig(vocab_size=self.vocab_size, num_mel_bins=self.num_mel_bins, d_model=self.hidden_size,
                             encoder_layers=self.num_hidden_layers, decoder_layers=self.num_hidden_layers,
                             encoder_attention_heads=self.num_attention_heads,
                             decoder_attention_heads=self.num_attention_heads, encoder_ffn_dim=16,
                             decoder_ffn_dim=16, max_source_positions=self.encoder_seq_length,
                             max_target_positions=40, pad_token_id=0, bos_token_id=98, eos_token_id=98,
                             decoder_start_token_id=85)

    def prepare_config_and_inputs_for_common(self):
        features = floats_tensor([self.batch_size, self.num_mel_bins, self.seq_length])
        decoder_input_ids = ids_tensor([self.batch_size, self.decoder_seq_length], self.vocab_size)
        decoder_attention_mask = torch.ones_like(decoder_input_ids)
        return self.get_config(), {"input_features": features, "decoder_input_ids": decoder_input_ids,
                                   "decoder_attention_mask": decoder_attention_mask}


class WhisperModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (WhisperModel, WhisperForConditionalGeneration)
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = WhisperTester(self)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        if return_labels and model_class is WhisperForConditionalGeneration:
            # The mixin gives labels to no speech-to-text class: the transcript is the decoder's input tokens.
            inputs["labels"] = inputs["decoder_input_ids"]
        return inputs

