"""Paged attention kernels (``@triton.jit`` bodies only; launchers live in
``kunlun_triton.ops``).

- `store_kv`: scatter new tokens' K/V rows into their pool slots.
- `decode`: split-KV decode (one query token per request), stage 1 partial
  softmax per split, stage 2 log-sum-exp merge.
- `extend`: new tokens attend to their cached prefix (gathered from the pool)
  and causally to each other.

Attention kernels take a ``USE_DOT`` constexpr: True builds on ``tl.dot``,
False on ``tl.sum`` of broadcast products (the Kunlun compiler is known to
break on ``tl.dot -> softmax -> tl.dot``). The unused branch is never traced,
so a ``USE_DOT=False`` kernel contains no dot at all.
"""
