"""Packed-document batches for bench/pytorch_fsdp2.py --documents (run_bench.sh's +docs runs),
the way torchtitan trains on packed documents: the token file that shardtrain reads (a version 3
file with a document table, written by benchlib.py doc-tokens) cut into the same seq_len
windows, each window's documents (a window's first token always begins one, as shardtrain's
data.packing = documents reads it) turned into
  - position ids that restart at 0 at every document,
  - labels = the ids, except each document's first token (-100: never a target, as ours), and
  - a FlexAttention block mask (torch.nn.attention.flex_attention.create_block_mask, compiled):
    causal AND same document, from the document index of every position.
The mask function is built once over a persistent document-index buffer that each step
overwrites, so the per-layer compiled graphs see the same function every step (no recompiles).

torch is imported inside the functions that need it: window_layout (plain lists) is tried on
machines without torch (tests/bench/flex_documents_test.py).
"""
import benchlib


def window_layout(starts, seq_len):
    """For one window whose documents begin at `starts` (relative, 0 first, increasing): the
    document index and the position id of each of its seq_len tokens, and the token indices
    that are no target (each document's first token)."""
    if not starts or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])) or \
            starts[-1] >= seq_len:
        raise ValueError(f"document starts {starts[:8]}... do not fit a window of {seq_len}")
    documents, positions = [], []
    bounds = list(starts) + [seq_len]
    for d in range(len(starts)):
        length = bounds[d + 1] - bounds[d]
        documents.extend([d] * length)
        positions.extend(range(length))
    return documents, positions, list(starts)


class DocumentBatches:
    """micro_batch windows per step, in file order, wrapping around: next() returns
    (input_ids, labels, position_ids, block_mask) on the GPU, [micro_batch, seq_len] each."""

    def __init__(self, token_file, seq_len, micro_batch, vocab_size):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask

        ids, starts = benchlib.read_document_tokens(token_file)
        windows = benchlib.document_windows(starts, len(ids), seq_len)
        if len(windows) < micro_batch:
            raise ValueError(f"{token_file}: {len(windows)} windows of {seq_len}, need "
                             f"{micro_batch}")
        if max(ids) >= vocab_size:
            raise ValueError(f"{token_file}: id {max(ids)} >= vocab_size {vocab_size}")
        all_ids = torch.tensor(list(ids[:len(windows) * seq_len]), dtype=torch.long)
        all_ids = all_ids.view(-1, seq_len)
        layouts = [window_layout(w, seq_len) for w in windows]
        self.ids = all_ids.cuda()
        self.documents = torch.tensor([l[0] for l in layouts], dtype=torch.int32).cuda()
        self.positions = torch.tensor([l[1] for l in layouts], dtype=torch.long).cuda()
        self.labels = self.ids.clone()
        for w, (_, _, firsts) in enumerate(layouts):
            self.labels[w, firsts] = -100
        self.micro_batch, self.seq_len, self.next_window = micro_batch, seq_len, 0
        self.document_counts = [len(w) for w in windows]
        # The mask reads this buffer; each step copies its windows' document indices in.
        self.step_documents = torch.zeros(micro_batch, seq_len, dtype=torch.int32, device="cuda")
        step_documents = self.step_documents

        def block_causal(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (step_documents[b, q_idx] == step_documents[b, kv_idx])

        self.mask_mod = block_causal
        self.create_block_mask = torch.compile(create_block_mask)

    def __next__(self):
        import torch

        rows = [(self.next_window + i) % len(self.ids) for i in range(self.micro_batch)]
        self.next_window = (self.next_window + self.micro_batch) % len(self.ids)
        index = torch.tensor(rows, device="cuda")
        self.step_documents.copy_(self.documents[index])
        block_mask = self.create_block_mask(self.mask_mod, self.micro_batch, None, self.seq_len,
                                            self.seq_len, device="cuda")
        return self.ids[index], self.labels[index], self.positions[index], block_mask

    def mean_documents(self):
        """Documents (pieces) per window, over the file."""
        return sum(self.document_counts) / len(self.document_counts)
