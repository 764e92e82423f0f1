"""Target-only tree speculative sampling: `tree_speculative_sampling_kernel`
backs `tree_speculative_sampling_target_only` (SGLang's verify step for
EAGLE, STANDALONE and NGRAM with sampled requests).

Per request b, a draft tree of D nodes (node 0 the root: the last verified
token) laid out as SGLang's `build_tree`: ``candidates[b, i]`` the token of
node i, ``next_token[b, i]`` its first child, ``next_sibling[b, i]`` its next
sibling (-1: none), ``retrive_index[b, i]`` its flat row in ``predicts``
(and in the target probs). ``q_i = target_probs[b, i]`` is the target's
distribution after node i. The walk, with one coin per accepted node
(``c_i = coins[b, i]``) and ``acc`` the target mass of the siblings tried
so far at the current level:

    node = 0, acc = 0, coin = c_0, accepted = 0
    for each child x of node, first to last:
        acc += q_node[tok_x]
        accept x  iff  q_node[tok_x] > 0 and
                       (coin < acc / threshold_acc  or  q_node[tok_x] >= threshold_single)
        accept: predicts[ret(node)] = tok_x, accept_index[b, ++accepted] = ret(x),
                node = x, acc = 0, coin = c_x; stop at accepted = S - 1 (S =
                num_speculative_tokens, accept_index's width), else go on
                with x's children
        reject: draft_probs[b, node, tok_x] = q_node[tok_x]; try the next sibling
    stop when a level's children run out (or a leaf is accepted).

With thresholds 1 this is exact sampling from the target: one coin walks
the siblings' stacked target masses, as a draw from q_node would; the
first sibling whose mass the coin falls into is accepted. If none is, the
token comes from the rest of q_node:

    r = relu(q_node - p_node),  p_node = draft_probs[b, node] after the rejections
        (p = 0 when accepted = S - 1: the bonus token has no draft)
    token = min { j : r_j > 0 and sum_{i <= j} r_i > u * sum r },  u = coins_final[b]
            (none, by rounding: the last j with r_j > 0; no r_j > 0: vocab - 1)
    predicts[ret(node)] = token, accept_token_num[b] = accepted

so every emitted token follows the target distribution (tests/ops/sampling/
test_tree_sampling.py checks it by chi-square).

The walk is vectorised over BLOCK_R requests: a step visits one node of each
live request (a tree of D nodes needs at most D - 1 steps), with per-row
state in registers. The tokens rejected at the current level (at most D - 1)
stay in a [BLOCK_R, BLOCK_D] register tile, so the final passes zero them
with compares instead of reading back ``draft_probs`` the same program just
wrote (that needs a barrier, which the portable subset does not promise).
The draw takes three reads of the chosen rows of q and p, no scan (Kunlun's
compiler has none): the total, the BLOCK_V tile where the running sum first
passes u, and a bisection on the index inside that tile
(log2(BLOCK_V) masked sums of the tile: ``prefix(j) = sum_{i <= j} r_i``
is monotone in j also in fp32, so the first j found has r_j > 0).
"""

import triton
import triton.language as tl

from ..loads import masked_load


@triton.jit
def _residual(q_ptr, p_ptr, row_off, cols, first, valid, bonus, rejected, n_rejected, BLOCK_V: tl.constexpr,
              BLOCK_D: tl.constexpr, IGNORES_OTHER: tl.constexpr):  # fmt: skip
    """r = relu(q - p) on one [BLOCK_R, BLOCK_V] tile of the chosen rows
    (`cols`: [1, BLOCK_V] or per row, starting at `first`), 0 at the tokens
    rejected at the last level (where p = q) and off the row. The compares
    run only for a tile holding a rejected token (a handful of a row's
    tiles), in a loop, not unrolled: static code and registers stay small."""
    offs = row_off[:, None] + cols
    q = masked_load(q_ptr + offs, valid, 0.0, IGNORES_OTHER)
    p = masked_load(p_ptr + offs, valid & ~bonus[:, None], 0.0, IGNORES_OTHER)
    r = tl.maximum(q - p, 0.0)
    near = (rejected >= first[:, None]) & (rejected < first[:, None] + BLOCK_V)
    if tl.max(tl.max(near.to(tl.int32), axis=1), axis=0) > 0:
        slots = tl.arange(0, BLOCK_D)[None, :]
        for d in range(tl.max(n_rejected, axis=0)):  # the slots in use (run-time: never unrolled)
            token = tl.sum(tl.where(slots == d, rejected, 0), axis=1)  # -1: an empty slot
            r = tl.where(cols == token[:, None], 0.0, r)
    return r


@triton.jit(do_not_specialize=["n_rows", "num_spec", "num_draft"])
def tree_speculative_sampling_kernel(
    predicts_ptr, accept_index_ptr, accept_num_ptr, candidates_ptr, retrive_index_ptr, next_token_ptr,
    next_sibling_ptr, coins_ptr, final_coins_ptr, target_ptr, draft_ptr,
    n_rows, num_spec, num_draft, vocab, threshold_single, threshold_acc,
    BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr, LOG_V: tl.constexpr,
    IGNORES_OTHER: tl.constexpr,
):  # fmt: skip
    """The walk and the draw of BLOCK_R requests (module docstring).
    threshold_acc arrives >= 1e-9 (the launcher clamps it, as SGLang's)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = rows < n_rows
    base = rows.to(tl.int64) * num_draft  # flat node index of each request's root
    accept_row = rows.to(tl.int64) * num_spec
    last_ret = masked_load(retrive_index_ptr + base, live, 0, IGNORES_OTHER)
    tl.store(accept_index_ptr + accept_row, last_ret.to(tl.int32), mask=live)
    coin = masked_load(coins_ptr + base, live, 0.0, IGNORES_OTHER)
    prob_node = base  # flat node whose target row the current level reads
    acc = tl.zeros([BLOCK_R], tl.float32)
    accepted = tl.zeros([BLOCK_R], tl.int32)
    cur = masked_load(next_token_ptr + base, live, -1, IGNORES_OTHER)
    active = live & (cur != -1) & ((accepted + 1) < num_spec)  # S = 1: only the draw
    slots = tl.arange(0, BLOCK_D)[None, :]
    rejected = tl.full([BLOCK_R, BLOCK_D], -1, tl.int32)  # token ids < 2**31: half the registers of int64
    n_rejected = tl.zeros([BLOCK_R], tl.int32)
    for _step in range(num_draft):
        if tl.max(active.to(tl.int32), axis=0) > 0:
            node = base + tl.where(active, cur, 0)
            token = masked_load(candidates_ptr + node, active, 0, IGNORES_OTHER)
            q_off = prob_node * vocab + token
            q = masked_load(target_ptr + q_off, active, 0.0, IGNORES_OTHER)
            acc += q
            take = active & (q > 0.0) & ((coin < acc / threshold_acc) | (q >= threshold_single))
            drop = active & ~take
            # SGLang's record of a rejection: the draft row takes the target's mass there
            tl.store(draft_ptr + q_off, q, mask=drop)
            rejected = tl.where(drop[:, None] & (slots == n_rejected[:, None]), token[:, None].to(tl.int32), rejected)
            n_rejected += drop.to(tl.int32)
            ret = masked_load(retrive_index_ptr + node, take, 0, IGNORES_OTHER)
            tl.store(predicts_ptr + last_ret, token.to(tl.int32), mask=take)
            accepted += take.to(tl.int32)
            tl.store(accept_index_ptr + accept_row + accepted, ret.to(tl.int32), mask=take)
            last_ret = tl.where(take, ret, last_ret)
            prob_node = tl.where(take, node, prob_node)
            acc = tl.where(take, 0.0, acc)
            coin = tl.where(take, masked_load(coins_ptr + node, take, 0.0, IGNORES_OTHER), coin)
            rejected = tl.where(take[:, None], -1, rejected)
            n_rejected = tl.where(take, 0, n_rejected)
            deeper = take & (accepted < num_spec - 1)
            child = masked_load(next_token_ptr + node, deeper, -1, IGNORES_OTHER)
            sibling = masked_load(next_sibling_ptr + node, drop, -1, IGNORES_OTHER)
            cur = tl.where(take, child, sibling)
            active = (deeper | drop) & (cur != -1)
    tl.store(accept_num_ptr + rows, accepted, mask=live)

    # The draw from relu(q - p) at the last accepted node: total and the last
    # positive token, then the tile where the running sum passes u, then the
    # token inside it.
    bonus = accepted == num_spec - 1
    zero = tl.zeros([BLOCK_R], tl.int32)
    row_off = prob_node * vocab
    total = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = live[:, None] & (cols[None, :] < vocab)
        r = _residual(target_ptr, draft_ptr, row_off, cols[None, :], start + zero, valid, bonus, rejected, n_rejected, BLOCK_V,
                      BLOCK_D, IGNORES_OTHER)  # fmt: skip
        total += tl.sum(r, axis=1)
    u = masked_load(final_coins_ptr + rows, live, 0.0, IGNORES_OTHER) * total
    found = ~live
    below = tl.zeros([BLOCK_R], tl.float32)  # the sum before the crossing tile
    running = tl.zeros([BLOCK_R], tl.float32)
    cross = tl.zeros([BLOCK_R], tl.int32)
    for start in range(0, vocab, BLOCK_V):
        if tl.min(found.to(tl.int32), axis=0) == 0:
            cols = start + tl.arange(0, BLOCK_V)
            valid = (~found)[:, None] & (cols[None, :] < vocab)
            r = _residual(target_ptr, draft_ptr, row_off, cols[None, :], start + zero, valid, bonus, rejected,
                          n_rejected, BLOCK_V, BLOCK_D, IGNORES_OTHER)  # fmt: skip
            passed = running + tl.sum(r, axis=1)
            hit = ~found & (passed > u)
            cross = tl.where(hit, start, cross)
            below = tl.where(hit, running, below)
            found = found | hit
            running = passed
    hit = live & found
    # No crossing (u rounded to the total, or no mass): the last token with
    # r > 0, else vocab - 1, as SGLang. Rare: one more read, only then.
    last_valid = tl.full([BLOCK_R], -1, tl.int32)
    if tl.max((live & ~found).to(tl.int32), axis=0) > 0:
        for start in range(0, vocab, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)
            valid = (live & ~found)[:, None] & (cols[None, :] < vocab)
            r = _residual(target_ptr, draft_ptr, row_off, cols[None, :], start + zero, valid, bonus, rejected,
                          n_rejected, BLOCK_V, BLOCK_D, IGNORES_OTHER)  # fmt: skip
            last_valid = tl.maximum(last_valid, tl.max(tl.where(r > 0.0, cols[None, :], -1), axis=1))
    lanes = tl.arange(0, BLOCK_V)
    cols = cross[:, None] + lanes[None, :]
    r = _residual(target_ptr, draft_ptr, row_off, cols, cross, hit[:, None] & (cols < vocab), bonus, rejected,
                  n_rejected, BLOCK_V, BLOCK_D, IGNORES_OTHER)  # fmt: skip
    lo = tl.full([BLOCK_R], -1, tl.int32)
    hi = tl.full([BLOCK_R], BLOCK_V - 1, tl.int32)  # the whole tile passes u
    for _bit in tl.static_range(LOG_V):
        mid = (lo + hi) >> 1
        prefix = tl.sum(tl.where(lanes[None, :] <= mid[:, None], r, 0.0), axis=1)
        passes = below + prefix > u
        hi = tl.where(passes, mid, hi)
        lo = tl.where(passes, lo, mid)
    token = tl.where(hit, cross + hi, tl.where(last_valid >= 0, last_valid, vocab - 1))
    tl.store(predicts_ptr + last_ret, token, mask=live)
