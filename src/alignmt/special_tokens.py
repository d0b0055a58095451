"""The special tokens every vocabulary starts with, and their ids: imported by data, models and
searches alike, so it depends on nothing."""

PAD, UNK, BOS, EOS = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SPECIALS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)
