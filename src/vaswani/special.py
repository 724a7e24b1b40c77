"""The special tokens of every vocabulary vaswani trains: their pieces and fixed ids, defined once.

SentencePiece is told these ids when it learns a vocabulary (data/tokenizer.py), ModelConfig takes them as
its defaults (pad_id, bos_id, eos_id), and the search never generates PAD or BOS: exported models are told
to suppress the same pieces.
"""

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
MASK = "<mask>"  # a text tokenizer's fifth special piece (id 4), for masked language models
NEVER_GENERATED = (PAD, BOS)  # as the search bans them; CTranslate2 and Marian are told to suppress them too
