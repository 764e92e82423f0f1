"""Target verify's custom mask (speculative decoding): the checks of
`extend_attention`'s ``custom_mask`` / ``mask_indptr`` (SGLang's layout:
request b's extend_len x (prefix_len + extend_len) row-major block from
custom_mask[mask_indptr[b]]; docs/speculative.md)."""

import torch

from ...runtime import INDEX_DTYPES
from ..validation import check_indptr, require_same_device, require_tensor


MASK_DTYPES = (torch.bool, torch.uint8, torch.int8)  # one byte a (row, key); nonzero = visible


def mask_mode(op: str, custom_mask, mask_indptr, sliding_window, unified_kv) -> bool:
    """Whether the call is a target verify; raises for what the kernel does
    not combine with a mask. Metadata only: runs with checks off too."""
    if (custom_mask is None) != (mask_indptr is None):
        given, missing = ("custom_mask", "mask_indptr") if mask_indptr is None else ("mask_indptr", "custom_mask")
        raise ValueError(f"{op}: {given} was given without {missing}; pass both (target verify) or neither (causal)")
    if custom_mask is None:
        return False
    if sliding_window is not None and sliding_window > 0:
        raise ValueError(f"{op}: custom_mask with a sliding_window is not supported (a tree token's position is "
                         "its depth, not its row); pass sliding_window=None")  # fmt: skip
    if unified_kv:
        raise ValueError(f"{op}: custom_mask with unified_kv is not supported; pass unified_kv=False")
    return True


def check_custom_mask(op: str, custom_mask, mask_indptr, q, batch, qo, kv):
    """Target verify's tree mask: SGLang's flat layout, request b's
    E_b x (P_b + E_b) block at mask_indptr[b] (so its size is checked
    against qo_indptr and kv_indptr; the kernel indexes a block in int32)."""
    require_tensor(op, "custom_mask", custom_mask, dtypes=MASK_DTYPES, ndim=1)
    require_tensor(op, "mask_indptr", mask_indptr, dtypes=INDEX_DTYPES, ndim=1)
    require_same_device(op, q_extend=q, custom_mask=custom_mask, mask_indptr=mask_indptr)
    masks = check_indptr(op, "mask_indptr", mask_indptr, batch, custom_mask.numel(), "len(custom_mask)")
    if batch:
        extend, prefix = qo[1:] - qo[:-1], kv[1:] - kv[:-1]
        sizes = extend * (prefix + extend)
        if int(sizes.max()) >= 2**31:
            raise ValueError(f"{op}: custom_mask: a request's extend_len x (prefix_len + extend_len) block holds "
                             f"{int(sizes.max())} entries, over the kernel's 2**31 - 1")  # fmt: skip
        wrong = ((masks[1:] - masks[:-1]) != sizes).nonzero().flatten()
        if wrong.numel():
            b = int(wrong[0])
            raise ValueError(f"{op}: mask_indptr gives request {b} a mask of {int(masks[b + 1] - masks[b])} entries; "
                             f"its extend_len x (prefix_len + extend_len) is {int(extend[b])} x "
                             f"{int(prefix[b] + extend[b])}")  # fmt: skip
