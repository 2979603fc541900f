"""A tiny GPT-2 trained by HuggingFace's Trainer, as a user would run it; prints one JSON line of results.

One process per device, since the Trainer picks its device once per process: `--device npu` lets the Trainer choose
npu by itself (as it does whenever torch_npu is importable), `--device cpu` passes `use_cpu=True`. Each `--run
PRECISION:OPTIM:ATTENTION` trains a fresh model from the same seed. The model is built from a config (no hub), the
data is seeded progressions of tokens. `--generate` adds greedy decoding from a fresh
model, `--attention` compares flash_attention_2 (on npu: torch_npu's npu_fusion_attention) with sdpa.
"""

import argparse
import json
import tempfile

import torch

import torch_npu  # noqa: F401  (what a torch_npu user writes; transformers imports it too)
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

VOCAB, SEQ = 96, 16


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        # Arithmetic progressions mod VOCAB: learnable, so the losses fall and any divergence shows.
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCAB, (n, 1), generator=g)
        stride = torch.randint(1, 4, (n, 1), generator=g)
        self.ids = (start + stride * torch.arange(SEQ)) % VOCAB

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def model(attn):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=VOCAB - 1,
                        eos_token_id=VOCAB - 1, attn_implementation=attn)
    return GPT2LMHeadModel(config)


def train(device, precision, optim, attn, steps):
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=4, learning_rate=3e-3, logging_steps=1,
            report_to=[], save_strategy="no", seed=0, data_seed=0, use_cpu=device == "cpu", optim=optim,
            bf16=precision == "bf16", fp16=precision == "fp16", disable_tqdm=True,
        )
        trainer = Trainer(model=model(attn), args=args, train_dataset=Tokens(4 * steps, seed=1))
        trainer.train()
        optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        return {
            "device": str(args.device),
            "param_device": str(next(trainer.model.parameters()).device),
            "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
            "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
            "scaler": type(trainer.accelerator.scaler).__name__ if trainer.accelerator.scaler else None,
        }


def generate(device):
    m = model("eager").to(device).eval()
    prompt = Tokens(2, seed=3).ids[:, :4].to(device)
    out = m.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                     pad_token_id=0)
    return {"device": str(out.device), "tokens": out.cpu().tolist()}


def attention(device):
    """The largest difference of a causal forward and of its input gradients between flash_attention_2 and sdpa, under
    bfloat16 autocast (flash attention computes in half precision; GPT-2's Conv1D layers leave transformers no float32
    dtype to pick for it)."""
    ids = Tokens(4, seed=4).ids.to(device)
    out = {}
    for attn in ("sdpa", "flash_attention_2"):
        m = model(attn).to(device)
        embeds = m.transformer.wte(ids).detach().requires_grad_()
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            logits = m(inputs_embeds=embeds).logits.float()
        logits.square().mean().backward()
        out[attn] = (logits.detach().cpu(), embeds.grad.cpu())
    return {
        "logits": (out["sdpa"][0] - out["flash_attention_2"][0]).abs().max().item(),
        "grad": (out["sdpa"][1] - out["flash_attention_2"][1]).abs().max().item(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["cpu", "npu"], required=True)
    p.add_argument("--run", action="append", default=[], help="PRECISION:OPTIM:ATTENTION")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--generate", action="store_true")
    p.add_argument("--attention", action="store_true")
    a = p.parse_args()
    result = {spec: train(a.device, *spec.split(":"), a.steps) for spec in a.run}
    if a.generate:
        result["generate"] = generate(a.device)
    if a.attention:
        result["attention"] = attention(a.device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
