"""EAGLE tree construction and greedy verification on SGLang's portable
Triton kernels.

SGLang 0.5.23 builds the draft tree and walks it at verify with CUDA, CPU
(sgl_kernel) or NPU kernels and refuses out-of-tree platforms
(`reject_out_of_tree_path`); its portable Triton versions (the XPU path) run
on every target with a Triton compiler, ours included. Scope: platform.
"""

from __future__ import annotations

TREE_BUILD_HOOK = "sglang.kernels.ops.speculative.spec_tree.build_tree_kernel_efficient_func"
TREE_VERIFY_HOOK = "sglang.kernels.ops.speculative.spec_tree.verify_tree_greedy_func"


def build_tree_triton(original, parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index,
                      retrieve_next_token, retrieve_next_sibling, topk, spec_steps, num_verify_tokens,
                      tree_mask_mode):  # fmt: skip
    """AROUND hook: SGLang's Triton tree builder (tree_mask, positions and the
    retrieve_* walks, in place)."""
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    sgl_build_tree_kernel_triton(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index,
                                 retrieve_next_token, retrieve_next_sibling, topk, spec_steps, num_verify_tokens,
                                 tree_mask_mode)  # fmt: skip


def verify_tree_greedy_triton(original, predicts, accept_index, accept_token_num, candidates, retrieve_index,
                              retrieve_next_token, retrieve_next_sibling, target_predict, topk=-1):  # fmt: skip
    """AROUND hook: SGLang's Triton greedy tree walk (the longest path of
    drafts equal to the target's argmax)."""
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton as walk

    walk(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num, candidates=candidates,
         retrieve_index=retrieve_index, retrieve_next_token=retrieve_next_token,
         retrieve_next_sibling=retrieve_next_sibling, target_predict=target_predict)  # fmt: skip
    return predicts, accept_index, accept_token_num
