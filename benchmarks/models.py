"""The models of the training-step benchmarks: small, but each exercising a different mix of ops."""

import torch
from torch import nn


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    )


class Transformer(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 128, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def batch(name: str, device: str):
    """A fixed input batch and target for the model."""
    g = torch.Generator().manual_seed(0)
    if name == "mlp":
        x, y = torch.randn(256, 512, generator=g), torch.randint(0, 10, (256,), generator=g)
    elif name == "cnn":
        x, y = torch.randn(64, 3, 32, 32, generator=g), torch.randint(0, 10, (64,), generator=g)
    else:  # the transformers (ours, GPT-2, LLaMA): 16 sequences of 64 tokens of a 1000-token vocabulary
        x = torch.randint(0, 1000, (16, 64), generator=g)
        y = torch.randint(0, 1000, (16 * 64,), generator=g)
    return x.to(device), y.to(device)


class Gpt2Tiny(nn.Module):
    """GPT-2 from transformers with the issue's tiny configuration and random weights; returns the logits."""

    def __init__(self):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128, use_cache=False,
                            bos_token_id=999, eos_token_id=999)  # GPT-2's 50256 is outside this vocabulary
        self.model = GPT2LMHeadModel(config)

    def forward(self, tokens):
        return self.model(tokens).logits


class LlamaSmall(nn.Module):
    """LLaMA from transformers, 2 layers 256 wide (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention), a
    1000-token vocabulary, random weights; returns the logits."""

    def __init__(self):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             use_cache=False, bos_token_id=999, eos_token_id=999, pad_token_id=0)
        self.model = LlamaForCausalLM(config)

    def forward(self, tokens):
        return self.model(tokens).logits


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": Transformer, "gpt2 tiny": Gpt2Tiny, "llama small": LlamaSmall}


def training_step(name: str, device: str, amp: torch.dtype | None = None, compiled: bool = False,
                  dtype: torch.dtype = torch.float32):
    """fn(n) running n training steps (forward, backward, optimizer) of the model on the device; with amp, the seed's
    mixed-precision loop: the forward under autocast in that dtype, and for float16 a GradScaler. compiled: the model
    through torch.compile (Inductor), forward and backward. dtype: the weights (and floating inputs) in that dtype,
    trained in it without autocast."""
    torch.manual_seed(0)
    module = MODELS[name]().to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    model = torch.compile(module) if compiled else module
    loss_fn = nn.CrossEntropyLoss()
    x, y = batch(name, device)
    x = x.to(dtype) if x.is_floating_point() else x
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(device_type) if amp == torch.float16 else None

    def run(n: int) -> None:
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type, dtype=amp or torch.float32, enabled=amp is not None):
                out = model(x)
                loss = loss_fn(out.reshape(-1, out.shape[-1]), y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

    return run


def inference_step(name: str, device: str, compiled: bool = False):
    """fn(n) running n forward passes of the model in eval mode without autograd; compiled: through torch.compile."""
    torch.manual_seed(0)
    module = MODELS[name]().to(device).eval()
    model = torch.compile(module) if compiled else module
    x, _ = batch(name, device)

    def run(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                model(x)

    return run
