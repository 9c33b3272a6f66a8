"""Trains a character bigram model on data/<dataset>/ with Adam; nanoGPT's knobs, command line and
console lines. Usage: python train.py config/train_shakespeare_char.py --learning_rate=3e-3"""

import os
import pickle
import time

import numpy as np

# default config values
out_dir = "out"
eval_interval = 2000
log_interval = 1
eval_iters = 200
always_save_checkpoint = True
dataset = "openwebtext"
batch_size = 12
block_size = 1024
learning_rate = 6e-4  # max learning rate
max_iters = 600000
beta1 = 0.9
beta2 = 0.95
seed = 1337
exec(open("configurator.py").read())  # noqa: SIM115 (as nanoGPT: overrides from the command line or a config file)

data_dir = os.path.join("data", dataset)
with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
    vocab_size = pickle.load(f)["vocab_size"]
train_data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
val_data = np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")
rng = np.random.default_rng(seed)


def get_batch(split):
    data = train_data if split == "train" else val_data
    ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
    x = np.stack([data[i : i + block_size] for i in ix]).astype(np.int64)
    y = np.stack([data[i + 1 : i + 1 + block_size] for i in ix]).astype(np.int64)
    return x.ravel(), y.ravel()


def loss_and_grad(table, x, y):
    logits = table[x]
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(y)), y]).mean()
    probs[np.arange(len(y)), y] -= 1
    grad = np.zeros_like(table)
    np.add.at(grad, x, probs / len(y))
    return float(loss), grad


def estimate_loss(table):
    out = {}
    for split in ("train", "val"):
        out[split] = float(np.mean([loss_and_grad(table, *get_batch(split))[0] for _ in range(eval_iters)]))
    return out


table = np.zeros((vocab_size, vocab_size))
m, v = np.zeros_like(table), np.zeros_like(table)
best_val_loss = 1e9
t0 = time.time()
for iter_num in range(max_iters + 1):
    if iter_num % eval_interval == 0:
        losses = estimate_loss(table)
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses["val"]
            if iter_num > 0:
                print(f"saving checkpoint to {out_dir}")
                os.makedirs(out_dir, exist_ok=True)
                with open(os.path.join(out_dir, "ckpt.pt"), "wb") as f:
                    pickle.dump({"model": table, "iter_num": iter_num, "best_val_loss": best_val_loss}, f)
    if iter_num == max_iters:
        break
    loss, grad = loss_and_grad(table, *get_batch("train"))
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    step = iter_num + 1
    table -= learning_rate * (m / (1 - beta1**step)) / (np.sqrt(v / (1 - beta2**step)) + 1e-8)
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {loss:.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")
