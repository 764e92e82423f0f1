"""Speculative decoding on the kunlun platform: the algorithms served and the
server's speculative shape (``algorithms.py``), the per-phase op counters
(``phases.py``), the draft model's attention backends (``draft.py``), SGLang's
portable tree kernels (``tree.py``), NGRAM (``ngram.py``), accept counters
(``accept.py``), the DeepSeek MTP draft head (``draft_models.py``).
Imports nothing: each module is imported by its own path."""
