"""
Data and evaluation for the tiny-lm target. FROZEN: do not modify.

The data is a small public-domain text shipped beside this file (Shakespeare,
see README.md), read as raw bytes: the vocabulary is the 256 byte values, so
there is no tokenizer to train and bits per byte is comparable across any
model. The first 90% is for training, the last 10% for validation.

evaluate_bpb() is the ground-truth metric: validation bits per byte on a fixed
slice of the validation bytes, scored in fixed windows, so every run is
measured on exactly the same bytes the same way.

Usage: python prepare.py   (checks the data and prints the split sizes)
"""

import hashlib
import math
import os

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Constants (fixed: changing any of these changes what val_bpb means)
# ---------------------------------------------------------------------------

DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shakespeare.txt")
DATA_SHA256 = "fcf2a9c8b592478b085ef2ef06af5f1cca8022075159422d4c542524ea6482b9"
VOCAB_SIZE = 256        # byte values
SPLIT_BLOCK = 2048      # the text is cut into blocks of this many bytes...
VAL_EVERY = 10          # ...and every 10th block is validation (both splits cover every play)
MAX_SEQ_LEN = 64        # evaluation window in bytes; models must accept inputs this long
EVAL_TOKENS = 16384     # bytes scored by evaluate_bpb: the first 256 windows of the validation split
EVAL_BATCH_SIZE = 32    # windows per forward pass during evaluation (speed only, not the result)

# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

_splits = {}


def load_split(split):
    """The bytes of `split` ("train" or "val") as a 1-D uint8 tensor on the CPU."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    if not _splits:
        with open(DATA_PATH, "rb") as f:
            raw = f.read()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != DATA_SHA256:
            raise SystemExit(f"error: {DATA_PATH} has changed (sha256 {digest[:12]}...): restore the shipped file")
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        blocks = data.split(SPLIT_BLOCK)
        _splits["train"] = torch.cat([b for i, b in enumerate(blocks) if i % VAL_EVERY != VAL_EVERY - 1])
        _splits["val"] = torch.cat([b for i, b in enumerate(blocks) if i % VAL_EVERY == VAL_EVERY - 1])
    return _splits[split]


def get_batch(split, batch_size, seq_len, generator=None, device="cpu"):
    """Random windows from `split`: inputs x and next-byte targets y, both (batch_size, seq_len) int64."""
    data = load_split(split)
    starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=generator)
    offsets = torch.arange(seq_len + 1)
    windows = data[starts[:, None] + offsets].long()
    x, y = windows[:, :-1], windows[:, 1:]
    if device != "cpu":
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return x, y


# ---------------------------------------------------------------------------
# Evaluation (DO NOT CHANGE: this is the fixed metric)
# ---------------------------------------------------------------------------


@torch.no_grad()
def evaluate_bpb(model, device="cpu"):
    """
    Validation bits per byte of `model` on the fixed evaluation slice.

    `model(x)` takes int64 byte ids of shape (B, MAX_SEQ_LEN) and returns logits
    of shape (B, MAX_SEQ_LEN, VOCAB_SIZE). Every one of the EVAL_TOKENS bytes is
    predicted once, from the bytes before it in its window. Uniform guessing
    scores 8.0; lower is better.
    """
    val = load_split("val")
    n_windows = EVAL_TOKENS // MAX_SEQ_LEN
    assert len(val) > n_windows * MAX_SEQ_LEN, "validation split is smaller than EVAL_TOKENS"
    starts = torch.arange(n_windows) * MAX_SEQ_LEN
    offsets = torch.arange(MAX_SEQ_LEN + 1)
    windows = val[starts[:, None] + offsets].long()
    was_training = model.training
    model.eval()
    total_nats = 0.0
    for i in range(0, n_windows, EVAL_BATCH_SIZE):
        chunk = windows[i : i + EVAL_BATCH_SIZE].to(device)
        logits = model(chunk[:, :-1])
        total_nats += F.cross_entropy(
            logits.float().reshape(-1, VOCAB_SIZE), chunk[:, 1:].reshape(-1), reduction="sum"
        ).item()
    model.train(was_training)
    return total_nats / (n_windows * MAX_SEQ_LEN) / math.log(2)


if __name__ == "__main__":
    train, val = load_split("train"), load_split("val")
    print(f"data:        {DATA_PATH}")
    print(f"sha256:      {DATA_SHA256[:12]}... ok")
    print(f"train_bytes: {len(train)}")
    print(f"val_bytes:   {len(val)}")
    print(f"eval_tokens: {EVAL_TOKENS} ({EVAL_TOKENS // MAX_SEQ_LEN} windows of {MAX_SEQ_LEN} bytes)")
    print("Ready: run `python train.py`.")
