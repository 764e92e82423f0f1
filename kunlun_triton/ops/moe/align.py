"""Token-to-expert alignment without atomics (Kunlun's compiler rejects them).

The T x K routing slots (slot s = t * K + k goes to expert ids[s]) are laid
out expert by expert, each expert's slots in slot order:

    count[e]     = #{s : ids[s] == e}
    start[e]     = sum_{e' < e} count[e']                (exclusive prefix)
    sorted[start[ids[s]] + rank(s)] = s,   rank(s) = #{s' < s : ids[s'] == ids[s]}

and the GEMMs walk it in blocks of BLOCK_M rows that never straddle two
experts: expert e owns ceil(count[e] / BLOCK_M) consecutive blocks, so an
expert with no token owns none and costs nothing. The block table holds,
per block, (expert, first sorted row, end row); blocks past the last hold
expert -1 and their programs return at once. The table and the sorted slots
share one int32 buffer, the table first: [n_blocks_bound, 3] then [n]. Ids outside [0, E) take no
slot (expert parallelism marks other ranks' experts -1).

Every count and prefix is a comparison reduced with tl.sum (the prefix sum
of v as sum_j [j < i] v_j over a tile), so no scan, sort or atomic is
needed. Up to SINGLE_PROGRAM_SLOTS slots (decode) one program does it all;
beyond, three launches: per-chunk counts (chunks in parallel), one program
turning them into prefixes and the block table, then the scatter (chunks in
parallel), each chunk offset by the counts of the chunks before it.
"""

import triton
import triton.language as tl

from .tiles import load_or_zero

SINGLE_PROGRAM_SLOTS = 256  # decode up to T * K = 256 slots: one launch instead of three
MAX_CHUNKS = 64  # the prefix program unrolls over at most this many chunks
MIN_CHUNK = 256
# ALIGN_TILE (the config key of fused_experts, default here) sizes every comparison
# tile: [SLOT_TILE, SLOT_TILE] slots, [BLOCK_E, SLOT_TILE] expert x slot, [EXPERT_TILE
# or BLOCK_TILE, BLOCK_E], all = ALIGN_TILE. The work is the same whatever the size (a
# smaller tile loops more); on a compiled target 16 keeps each tile at <= 16 values per
# thread at E = 128 (sm_90, 4 warps: moe_align_single_kernel 63 registers, no spill,
# 1324 SASS; at 64 / 64 / 32 with the expert loop unrolled: 255 registers, 40 bytes
# spilled, 7301 SASS). The interpreter pays per tile op, not per value: its file sets 64.
ALIGN_TILE = 16


@triton.jit
def _slot_ids(ids_ptr, slots, n_slots, E: tl.constexpr):
    """Expert ids of `slots`, -1 past the end and for ids outside [0, E)."""
    ok = slots < n_slots
    ids = tl.load(ids_ptr + slots, mask=ok).to(tl.int32)
    return tl.where(ok & (ids >= 0) & (ids < E), ids, -1)


@triton.jit
def _count(ids_ptr, start, stop, n_slots, E: tl.constexpr, BLOCK_E: tl.constexpr, SLOT_TILE: tl.constexpr):
    """[BLOCK_E] counts of each expert over slots [start, stop)."""
    experts = tl.arange(0, BLOCK_E)
    counts = tl.zeros([BLOCK_E], tl.int32)
    for s0 in range(start, stop, SLOT_TILE):
        ids = _slot_ids(ids_ptr, s0 + tl.arange(0, SLOT_TILE), stop, E)
        counts += tl.sum((experts[:, None] == ids[None, :]).to(tl.int32), 1)
    return counts


@triton.jit
def _rank(ids_ptr, ids, slots, start, s0, n_slots, E: tl.constexpr, SLOT_TILE: tl.constexpr):
    """rank[i] = #{s in [start, slots[i]) : ids[s] == ids[i]} for the tile slots = s0 + arange."""
    rank = tl.zeros([SLOT_TILE], tl.int32)
    for j0 in range(start, s0 + SLOT_TILE, SLOT_TILE):
        others = j0 + tl.arange(0, SLOT_TILE)
        other_ids = _slot_ids(ids_ptr, others, n_slots, E)
        same = (other_ids[None, :] == ids[:, None]) & (others[None, :] < slots[:, None])
        rank += tl.sum(same.to(tl.int32), 1)
    return rank


@triton.jit
def _layout(counts, block_info_ptr, n_blocks_bound, E: tl.constexpr, BLOCK_E: tl.constexpr,
            BLOCK_M: tl.constexpr, EXPERT_TILE: tl.constexpr, BLOCK_TILE: tl.constexpr):  # fmt: skip
    """From the [BLOCK_E] expert counts: each expert's first sorted row
    (returned) and the block table (written)."""
    experts = tl.arange(0, BLOCK_E)
    starts = tl.zeros([BLOCK_E], tl.int32)
    block_ends = tl.zeros([BLOCK_E], tl.int32)
    for r0 in range(0, BLOCK_E, EXPERT_TILE):  # a loop: unrolled, its tiles stay live at once (spills)
        prior = r0 + tl.arange(0, EXPERT_TILE)  # experts e' of this tile
        prior_counts = tl.sum(tl.where(experts[None, :] == prior[:, None], counts[None, :], 0), 1)
        prior_blocks = (prior_counts + BLOCK_M - 1) // BLOCK_M
        starts += tl.sum(tl.where(prior[:, None] < experts[None, :], prior_counts[:, None], 0), 0)
        block_ends += tl.sum(tl.where(prior[:, None] <= experts[None, :], prior_blocks[:, None], 0), 0)
    block_starts = block_ends - (counts + BLOCK_M - 1) // BLOCK_M
    real = experts < E
    for b0 in range(0, n_blocks_bound, BLOCK_TILE):
        blocks = b0 + tl.arange(0, BLOCK_TILE)
        owner = tl.sum(((block_ends[None, :] <= blocks[:, None]) & real[None, :]).to(tl.int32), 1)
        owns = experts[None, :] == owner[:, None]
        first = tl.sum(tl.where(owns, starts[None, :] + (blocks[:, None] - block_starts[None, :]) * BLOCK_M, 0), 1)
        end = tl.minimum(first + BLOCK_M, tl.sum(tl.where(owns, (starts + counts)[None, :], 0), 1))
        in_table = blocks < n_blocks_bound
        tl.store(block_info_ptr + 3 * blocks, tl.where(owner < E, owner, -1), mask=in_table)
        tl.store(block_info_ptr + 3 * blocks + 1, first, mask=in_table)
        tl.store(block_info_ptr + 3 * blocks + 2, end, mask=in_table)
    return starts


@triton.jit(do_not_specialize=["n_slots", "n_blocks_bound"])
def moe_align_single_kernel(
    ids_ptr,
    block_info_ptr,  # the block table, then the sorted slots
    n_slots,
    n_blocks_bound,
    E: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SLOT_TILE: tl.constexpr,
    EXPERT_TILE: tl.constexpr,
    BLOCK_TILE: tl.constexpr,
):
    """The whole alignment in one program (few slots: decode)."""
    sorted_ptr = block_info_ptr + 3 * n_blocks_bound
    counts = _count(ids_ptr, 0, n_slots, n_slots, E, BLOCK_E, SLOT_TILE)
    starts = _layout(counts, block_info_ptr, n_blocks_bound, E, BLOCK_E, BLOCK_M, EXPERT_TILE, BLOCK_TILE)
    experts = tl.arange(0, BLOCK_E)
    for s0 in range(0, n_slots, SLOT_TILE):
        slots = s0 + tl.arange(0, SLOT_TILE)
        ids = _slot_ids(ids_ptr, slots, n_slots, E)
        rank = _rank(ids_ptr, ids, slots, 0, s0, n_slots, E, SLOT_TILE)
        first = tl.sum(tl.where(experts[None, :] == ids[:, None], starts[None, :], 0), 1)
        tl.store(sorted_ptr + first + rank, slots, mask=ids >= 0)


@triton.jit(do_not_specialize=["n_slots", "chunk"])
def moe_align_count_kernel(
    ids_ptr,
    chunk_counts_ptr,  # [chunks, E] int32
    n_slots,
    chunk,
    E: tl.constexpr,
    BLOCK_E: tl.constexpr,
    SLOT_TILE: tl.constexpr,
):
    """Counts of each expert in one chunk of `chunk` slots."""
    c = tl.program_id(0)
    counts = _count(ids_ptr, c * chunk, tl.minimum((c + 1) * chunk, n_slots), n_slots, E, BLOCK_E, SLOT_TILE)
    experts = tl.arange(0, BLOCK_E)
    tl.store(chunk_counts_ptr + c * E + experts, counts, mask=experts < E)


@triton.jit(do_not_specialize=["n_chunks", "n_blocks_bound"])
def moe_align_prefix_kernel(
    chunk_counts_ptr,
    starts_ptr,  # [E] int32: each expert's first sorted row
    block_info_ptr,
    n_chunks,
    n_blocks_bound,
    E: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    EXPERT_TILE: tl.constexpr,
    BLOCK_TILE: tl.constexpr,
    ZERO_AFTER_LOAD: tl.constexpr,
):
    """One program: chunk counts -> per-chunk exclusive prefixes (in place),
    expert starts and the block table. The chunk loop is unrolled so its
    independent loads are all in flight at once."""
    experts = tl.arange(0, BLOCK_E)
    running = tl.zeros([BLOCK_E], tl.int32)
    for c in tl.static_range(MAX_CHUNKS):
        here = experts < (c < n_chunks).to(tl.int32) * E  # (a block & a scalar bool trips the interpreter)
        row = load_or_zero(chunk_counts_ptr + c * E + experts, here, ZERO_AFTER_LOAD)
        tl.store(chunk_counts_ptr + c * E + experts, running, mask=here)
        running += row
    starts = _layout(running, block_info_ptr, n_blocks_bound, E, BLOCK_E, BLOCK_M, EXPERT_TILE, BLOCK_TILE)
    tl.store(starts_ptr + experts, starts, mask=experts < E)


@triton.jit(do_not_specialize=["n_slots", "chunk"])
def moe_align_scatter_kernel(
    ids_ptr,
    chunk_offsets_ptr,  # [chunks, E]: slots of each expert in the chunks before
    starts_ptr,
    sorted_ptr,
    n_slots,
    chunk,
    E: tl.constexpr,
    SLOT_TILE: tl.constexpr,
):
    """Place one chunk's slots: start[e] + (e's slots in earlier chunks) + rank in the chunk."""
    c = tl.program_id(0)
    start = c * chunk
    stop = tl.minimum(start + chunk, n_slots)
    for s0 in range(start, stop, SLOT_TILE):
        slots = s0 + tl.arange(0, SLOT_TILE)
        ids = _slot_ids(ids_ptr, slots, stop, E)
        placed = ids >= 0
        safe = tl.where(placed, ids, 0)
        base = tl.load(starts_ptr + safe, mask=placed) + tl.load(chunk_offsets_ptr + c * E + safe, mask=placed)
        rank = _rank(ids_ptr, ids, slots, start, s0, stop, E, SLOT_TILE)
        tl.store(sorted_ptr + base + rank, slots, mask=placed)
