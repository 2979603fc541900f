"""Evaluation under data parallelism with accelerate and the Trainer, as `accelerate launch` runs it.

Launched with `accelerate launch --num_processes 2 accelerate_eval.py` each rank takes npu:<local rank> and the ranks
talk over hccl; with `torchrun --nproc_per_node 2 accelerate_eval.py --cpu` it is the same on the CPU over gloo, the reference. Rank 0 prints one JSON line:
the gathered predictions and per-sample losses (`gather_for_metrics`, which drops the padding of an uneven split),
a 2-D `gather`, and `Trainer.evaluate()`'s loss.
"""

import argparse
import json
import tempfile

import torch

import torch_npu  # noqa: F401
from accelerate import Accelerator
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

VOCAB, SEQ, SAMPLES = 96, 16, 10


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(2)
        self.ids = torch.randint(0, VOCAB, (SAMPLES, SEQ), generator=g)

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def model():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
                                      bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cpu", action="store_true")
    a = p.parse_args()

    accelerator = Accelerator(cpu=a.cpu)
    net, loader = accelerator.prepare(model(), torch.utils.data.DataLoader(Tokens(), batch_size=3))
    net.eval()
    predictions, losses = [], []
    with torch.no_grad():
        for batch in loader:
            logits = net(input_ids=batch["input_ids"]).logits
            per_sample = torch.nn.functional.cross_entropy(
                logits[:, :-1].transpose(1, 2), batch["input_ids"][:, 1:], reduction="none").mean(1)
            predictions.append(accelerator.gather_for_metrics(logits.argmax(-1)).cpu())
            losses.append(accelerator.gather_for_metrics(per_sample).cpu())
    rank_rows = accelerator.gather(torch.full((2, 3), float(accelerator.process_index), device=accelerator.device))

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_eval_batch_size=3, report_to=[], use_cpu=a.cpu,
                                 disable_tqdm=True)
        eval_loss = Trainer(model=model(), args=args, eval_dataset=Tokens()).evaluate()["eval_loss"]

    if accelerator.is_main_process:
        print(json.dumps({
            "processes": accelerator.num_processes,
            "distributed_type": str(accelerator.distributed_type),
            "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
            "device": str(accelerator.device),
            "predictions": torch.cat(predictions).tolist(),
            "losses": torch.cat(losses).tolist(),
            "rank_rows": rank_rows.cpu().tolist(),
            "eval_loss": eval_loss,
        }))
    accelerator.end_training()


if __name__ == "__main__":
    main()
