"""alignmt: recurrent encoder-decoders with attention for machine translation."""

import os

# Large CPU tensors on transparent huge pages: a training step allocates tens of MiB of fresh
# buffers (logits, saved activations, their gradients), and glibc maps every block above
# 32 MiB afresh, so each step faulted its memory in 4 KiB pages. Torch reads this variable at
# its first large allocation; an explicit setting of the user's wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
