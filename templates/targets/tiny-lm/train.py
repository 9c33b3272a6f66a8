"""
Tiny byte-level GPT for the tiny-lm target. This is the file to change.

Trains for a fixed wall-clock TIME_BUDGET, then reports validation bits per
byte from prepare.evaluate_bpb (frozen). Runs on CPU; uses CUDA when present.

Usage: python train.py > run.log 2>&1 && grep '^val_bpb:' run.log
"""

import math
import os
import sys
import time

t_start = time.time()

import torch
import torch.nn as nn
import torch.nn.functional as F

from prepare import MAX_SEQ_LEN, VOCAB_SIZE, evaluate_bpb, get_batch

# ---------------------------------------------------------------------------
# Hyperparameters (plain assignments: tools rewrite them by name)
# ---------------------------------------------------------------------------

DEPTH = 2               # transformer blocks
WIDTH = 128             # residual stream width (embedding size)
N_HEADS = 4             # attention heads; must divide WIDTH
MLP_RATIO = 4           # MLP hidden size = MLP_RATIO * WIDTH
LEARNING_RATE = 3e-3    # peak AdamW learning rate
BATCH_SIZE = 16         # sequences per step
SEQ_LEN = 64            # training context in bytes; evaluation always uses MAX_SEQ_LEN (prepare.py)
WARMUP_FRAC = 0.05      # fraction of the time budget spent ramping the learning rate up
FINAL_LR_FRAC = 0.1     # learning rate at the end of the budget, as a fraction of the peak
WEIGHT_DECAY = 0.1      # AdamW decoupled weight decay on matrices (not on norms and biases)
GRAD_CLIP = 1.0         # max gradient norm; 0 disables clipping
TIME_BUDGET = 25        # seconds of training (the env var TIME_BUDGET overrides it, e.g. for tests)
SEED = 1337             # seeds the initialisation and the batch order
NUM_THREADS = 1         # CPU threads; on 2 cores, 2 threads ran ~20% fewer steps than 1 at this size
LOG_EVERY = 50          # print a step line every this many steps

# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, width, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, width, n_heads, mlp_ratio):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, n_heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width)
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, depth, width, n_heads, mlp_ratio):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB_SIZE, width)
        self.pos_emb = nn.Embedding(MAX_SEQ_LEN, width)
        self.blocks = nn.ModuleList(Block(width, n_heads, mlp_ratio) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB_SIZE, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: the same byte table reads and writes
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                # residual branches start small so the stream stays near unit scale
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * depth))

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------

# Bad settings fail here, in one line, before any time is spent training.
if min(DEPTH, WIDTH, N_HEADS, MLP_RATIO, BATCH_SIZE, NUM_THREADS) < 1 or LEARNING_RATE <= 0:
    sys.exit("error: DEPTH, WIDTH, N_HEADS, MLP_RATIO, BATCH_SIZE, NUM_THREADS must be >= 1 and LEARNING_RATE > 0")
if WIDTH % N_HEADS != 0:
    sys.exit(f"error: N_HEADS ({N_HEADS}) must divide WIDTH ({WIDTH})")
if not 1 <= SEQ_LEN <= MAX_SEQ_LEN:
    sys.exit(f"error: SEQ_LEN ({SEQ_LEN}) must be between 1 and MAX_SEQ_LEN ({MAX_SEQ_LEN})")
try:
    time_budget = float(os.environ.get("TIME_BUDGET", TIME_BUDGET))
except ValueError:
    sys.exit(f"error: the TIME_BUDGET environment variable must be seconds, not {os.environ['TIME_BUDGET']!r}")

torch.manual_seed(SEED)
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    torch.set_num_threads(NUM_THREADS)
generator = torch.Generator().manual_seed(SEED)

model = GPT(DEPTH, WIDTH, N_HEADS, MLP_RATIO).to(device)
num_params = sum(p.numel() for p in model.parameters())
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
    lr=LEARNING_RATE,
    betas=(0.9, 0.95),
)
print(
    f"device: {device} | threads: {torch.get_num_threads()} | params: {num_params / 1e6:.2f}M"
    f" | time_budget: {time_budget:g}s",
    flush=True,
)


def lr_at(progress):
    """Linear warmup, then linear decay to FINAL_LR_FRAC; progress is the fraction of the time budget used."""
    if progress < WARMUP_FRAC:
        return LEARNING_RATE * progress / WARMUP_FRAC
    decay_progress = (progress - WARMUP_FRAC) / max(1e-9, 1 - WARMUP_FRAC)
    return LEARNING_RATE * (1 - (1 - FINAL_LR_FRAC) * min(1.0, decay_progress))


# ---------------------------------------------------------------------------
# Training loop: the schedule follows wall-clock time, so every run gets the same budget
# ---------------------------------------------------------------------------

step = 0
training_seconds = 0.0
t_log, tokens_since_log = time.time(), 0
while training_seconds < time_budget:
    t0 = time.time()
    lr = lr_at(training_seconds / time_budget)
    for group in optimizer.param_groups:
        group["lr"] = lr
    x, y = get_batch("train", BATCH_SIZE, SEQ_LEN, generator, device)
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, VOCAB_SIZE), y.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if GRAD_CLIP > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    optimizer.step()
    step += 1
    tokens_since_log += BATCH_SIZE * SEQ_LEN
    training_seconds += time.time() - t0

    if step == 1 or step % LOG_EVERY == 0:
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            sys.exit(f"error: loss is {loss_value} at step {step}: training diverged")
        tok_per_s = tokens_since_log / max(1e-9, time.time() - t_log)
        done = 100 * min(1.0, training_seconds / time_budget)
        print(
            f"step {step:05d} ({done:.1f}%) | loss: {loss_value:.4f} | lr: {lr:.1e} | tok/sec: {tok_per_s:,.0f}",
            flush=True,
        )
        t_log, tokens_since_log = time.time(), 0

# ---------------------------------------------------------------------------
# Evaluation and summary (the block below is what tools read: keep its format)
# ---------------------------------------------------------------------------

val_bpb = evaluate_bpb(model, device)
if device == "cuda":
    peak_mb, peak_kind = torch.cuda.max_memory_allocated() / 2**20, "cuda"
elif sys.platform == "win32":
    peak_mb, peak_kind = 0.0, "unavailable"  # no getrusage on Windows
else:
    import resource

    # ru_maxrss is KiB on Linux, bytes on macOS
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_mb, peak_kind = rss / (2**20 if sys.platform == "darwin" else 2**10), "cpu_rss"

# The weights, where a campaign keeps this run's outputs (ARS_OUTPUT_DIR), else beside this script.
out_dir = os.environ.get("ARS_OUTPUT_DIR") or "out"
os.makedirs(out_dir, exist_ok=True)
torch.save({"model": model.state_dict(), "depth": DEPTH, "val_bpb": val_bpb}, os.path.join(out_dir, "model.pt"))

print("---")
print(f"val_bpb:          {val_bpb:.6f}")
print(f"training_seconds: {training_seconds:.1f}")
print(f"total_seconds:    {time.time() - t_start:.1f}")
print(f"peak_vram_mb:     {peak_mb:.1f}")
print(f"peak_memory_kind: {peak_kind}")
print(f"num_steps:        {step}")
print(f"num_params_M:     {num_params / 1e6:.2f}")
print(f"depth:            {DEPTH}")
