"""The addition task as a model trains on it: a split as batches, the answer-token loss, accuracy.

The only loss is the cross-entropy of the answer token, read at the prompt's last position; a
prediction is the argmax over the number tokens. Used by training from scratch and by fine-tuning.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from core.errors import CoreError
from core.models.capture import left_pad
from core.models.loading import check_device


class AdditionBatches:
    """Tokenized prompts and answer tokens of a split; left-padded batches in a seeded order."""

    def __init__(self, tokenizer, examples, number_ids: np.ndarray):
        self.pad = tokenizer.pad_token_id
        self.encoded = tokenizer([e.prompt for e in examples])["input_ids"]
        self.targets = np.array([number_ids[e.answer] for e in examples])
        self.answers = np.array([e.answer for e in examples])

    def __len__(self):
        return len(self.encoded)

    def batches(self, batch_size: int, order=None):
        order = np.arange(len(self)) if order is None else order
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, mask, pos = left_pad([self.encoded[i] for i in idx], self.pad)
            yield idx, ids, mask, pos, torch.as_tensor(self.targets[idx])


def answer_logits(model, ids, mask, pos):
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=1)
    return out.logits[:, -1, :]


def answer_loss(model, ids, mask, pos, target, precision: str = "float32"):
    """Mean cross-entropy of the answer token, read at the last prompt position: the only loss."""
    device = model_device(model)
    ids, mask, pos, target = (t.to(device) for t in (ids, mask, pos, target))
    with autocast(precision, device.type):
        logits = answer_logits(model, ids, mask, pos)
    return torch.nn.functional.cross_entropy(logits.float(), target)


def evaluate_split(model, data: AdditionBatches, number_ids, batch_size: int, precision: str, subset=None):
    """(accuracy, mean answer-token loss) over a split; prediction = argmax over the number tokens."""
    order = np.arange(len(data)) if subset is None else subset
    device = model_device(model)
    ids_t = torch.as_tensor(number_ids, device=device)
    correct, loss_sum = 0, 0.0
    model.eval()
    with torch.no_grad(), autocast(precision, device.type):
        for idx, ids, mask, pos, target in data.batches(batch_size * 4, order):
            ids, mask, pos, target = (t.to(device) for t in (ids, mask, pos, target))
            logits = answer_logits(model, ids, mask, pos).float()
            loss_sum += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
            pred = logits[:, ids_t].argmax(-1).cpu().numpy()
            correct += int((pred == data.answers[idx]).sum())
    model.train()
    return correct / len(order), loss_sum / len(order)


def autocast(precision: str, device_type: str = "cpu"):
    """bfloat16 autocast on `device_type` for precision "bfloat16", otherwise a context that does nothing."""
    if precision == "bfloat16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def model_device(model):
    """The device `model`'s weights are on (the first parameter's or buffer's)."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def training_device(name: str | None):
    """The torch device a training runs on: `name` ("cpu", "cuda", "cuda:1", "auto"; None is the CPU)."""
    device = torch.device(check_device(name or "cpu"))
    if device.type not in ("cpu", "cuda"):
        raise CoreError(f"--device {name}: training runs on cpu or cuda only")
    return device
