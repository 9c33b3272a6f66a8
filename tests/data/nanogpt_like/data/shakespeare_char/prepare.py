"""Character-level data from input.txt beside this file: train.bin and val.bin (uint16 ids, 90/10
split) and meta.pkl (the vocabulary). All three are ignored by git, as in nanoGPT."""

import os
import pickle

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "input.txt")) as f:
    data = f.read()
chars = sorted(set(data))
stoi = {ch: i for i, ch in enumerate(chars)}
ids = np.array([stoi[c] for c in data], dtype=np.uint16)
split = int(len(ids) * 0.9)
ids[:split].tofile(os.path.join(here, "train.bin"))
ids[split:].tofile(os.path.join(here, "val.bin"))
with open(os.path.join(here, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
print(f"vocab size: {len(chars):,}; train has {split:,} tokens; val has {len(ids) - split:,} tokens")
