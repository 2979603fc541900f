"""The checks diffusers' model tests make of every model, for the models of this folder: outputs, determinism,
save and reload, return_dict, a training step, EMA, gradient checkpointing, attention processors, half precision
and group offloading. Each runs on diffusers' `torch_device` (DIFFUSERS_TEST_DEVICE)."""
import tempfile

import torch
from diffusers.hooks import apply_group_offloading
from diffusers.models.attention_processor import AttnProcessor
from diffusers.training_utils import EMAModel

from ..testing_utils import torch_device


class ModelChecksMixin:
    model_class = None

    def init_args_and_inputs(self) -> tuple[dict, dict]:
        raise NotImplementedError

    def model_and_inputs(self, seed=0):
        kwargs, inputs = self.init_args_and_inputs()
        torch.manual_seed(seed)
        return self.model_class(**kwargs).to(torch_device), inputs

    def output(self, model, inputs, **extra):
        return model(**inputs, **extra, return_dict=False)[0]

    def test_output(self):
        model, inputs = self.model_and_inputs()
        with torch.no_grad():
            out = self.output(model.eval(), inputs)
        first = next(iter(inputs.values()))
        self.assertEqual(out.shape, first.shape)
        self.assertTrue(torch.isfinite(out).all())

    def test_determinism(self):
        model, inputs = self.model_and_inputs()
        with torch.no_grad():
            torch.testing.assert_close(self.output(model.eval(), inputs), self.output(model, inputs), rtol=0, atol=0)

    def test_outputs_equivalence(self):
        model, inputs = self.model_and_inputs()
        with torch.no_grad():
            as_dict = model.eval()(**inputs).sample
            torch.testing.assert_close(as_dict, self.output(model, inputs), rtol=0, atol=0)

    def test_from_save_pretrained(self):
        model, inputs = self.model_and_inputs()
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            reloaded = self.model_class.from_pretrained(folder).to(torch_device)
        self.assertEqual(reloaded.device.type, torch.device(torch_device).type)
        with torch.no_grad():
            torch.testing.assert_close(self.output(reloaded.eval(), inputs), self.output(model.eval(), inputs),
                                       rtol=0, atol=1e-5)

    def loss_and_grads(self, model, inputs):
        out = self.output(model.train(), inputs)
        loss = torch.nn.functional.mse_loss(out, torch.zeros_like(out).normal_(generator=None))
        model.zero_grad()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def test_training(self):
        model, inputs = self.model_and_inputs()
        loss, grads = self.loss_and_grads(model, inputs)
        self.assertTrue(torch.isfinite(loss))
        self.assertTrue(grads and all(torch.isfinite(g).all() for g in grads.values()))

    def test_ema_training(self):
        model, inputs = self.model_and_inputs()
        ema = EMAModel(model.parameters())
        before = [p.clone() for p in ema.shadow_params]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.loss_and_grads(model, inputs)
        optimizer.step()
        ema.step(model.parameters())
        self.assertTrue(any(not torch.equal(a, b) for a, b in zip(before, ema.shadow_params)))
        self.assertTrue(all(p.device.type == torch.device(torch_device).type for p in ema.shadow_params))

    def test_gradient_checkpointing(self):
        # Same weights and the same noise target: checkpointing recomputes the forward, it must not change grads.
        plain, inputs = self.model_and_inputs()
        torch.manual_seed(1)
        loss, grads = self.loss_and_grads(plain, inputs)
        checkpointed, _ = self.model_and_inputs()
        checkpointed.enable_gradient_checkpointing()
        self.assertTrue(checkpointed.is_gradient_checkpointing)
        torch.manual_seed(1)
        loss_ckpt, grads_ckpt = self.loss_and_grads(checkpointed, inputs)
        torch.testing.assert_close(loss_ckpt, loss, rtol=1e-5, atol=1e-6)
        self.assertEqual(grads_ckpt.keys(), grads.keys())
        for name in grads:
            torch.testing.assert_close(grads_ckpt[name], grads[name], rtol=1e-4, atol=1e-5, msg=name)

    def test_attention_processors(self):
        # The default processor (scaled_dot_product_attention) against the plain matmul-softmax one.
        model, inputs = self.model_and_inputs()
        with torch.no_grad():
            sdpa = self.output(model.eval(), inputs)
            model.set_attn_processor(AttnProcessor())
            plain = self.output(model, inputs)
        torch.testing.assert_close(plain, sdpa, rtol=1e-4, atol=1e-4)

    def test_half_precision_inference(self):
        for dtype in (torch.float16, torch.bfloat16):
            model, inputs = self.model_and_inputs()
            with torch.no_grad():
                reference = self.output(model.eval(), inputs)
                half_inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
                out = self.output(model.to(dtype), half_inputs)
            self.assertEqual(out.dtype, dtype)
            torch.testing.assert_close(out.float(), reference, rtol=0.05, atol=0.05, msg=str(dtype))

    def test_group_offloading(self):
        # Weights kept on the CPU and brought to the device block by block around each forward.
        model, inputs = self.model_and_inputs()
        with torch.no_grad():
            reference = self.output(model.eval(), inputs)
            model.to("cpu")
            apply_group_offloading(model, onload_device=torch.device(torch_device), offload_type="block_level",
                                   num_blocks_per_group=1)
            offloaded = self.output(model, inputs)
        self.assertTrue(all(p.device.type == "cpu" for p in model.parameters()))
        torch.testing.assert_close(offloaded, reference, rtol=1e-5, atol=1e-6)
