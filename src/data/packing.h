// Packing: tokenized documents -> a stream of fixed-length sequences for a token file.
//
// The stream is a whole number of sequences of exactly seq_len tokens, so the token-file
// dataset's windows (data/dataset.h: non-overlapping seq_len windows from token 0) are exactly
// these sequences. Steps:
//   1. Every document gets the EOS id appended as its separator unless its last token already is
//      EOS; the separator's mask is the document's separator_trained.
//   2. Documents are visited in the order shuffled_indices(n, seed) (data/sampler.h), so the
//      result depends only on the documents and the seed.
//   3. A document longer than seq_len (separator included) is, by `overlong`:
//        split:    cut into seq_len pieces; each full piece is a sequence of its own and the
//                  remainder is packed like a short document;
//        truncate: cut to its first seq_len tokens (the separator is lost);
//        drop:     left out.
//   4. Documents (and remainders) are placed whole by best fit: into the open sequence with the
//      least free room that still fits them, the earliest-opened one among equals; a new
//      sequence is opened when none fits. No document crosses a sequence boundary. With
//      one_per_sequence (data.packing = none) every document or piece opens a sequence of its
//      own instead.
//   5. Sequences are written in the order they were opened; each one's free room is filled with
//      pad_id tokens with mask 0.
// The first token of every document and remainder piece gets mask 0: within the sequence it
// follows another document, from which it cannot be predicted. document_starts records the
// token index where each document or piece begins (the token file's document table); the
// padding after the last one of a sequence belongs to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/choice_names.h"
#include "data/rendered_document.h"

namespace shardtrain {

enum class OverlongPolicy { kSplit, kTruncate, kDrop };

// split, truncate, drop (data.overlong, prepare --overlong).
const ChoiceNames<OverlongPolicy>& overlong_policy_names();

struct PackingOptions {
  int64_t seq_len = 512;  // REQUIRES: >= 2
  int32_t eos_id = 0;
  int32_t pad_id = 0;
  OverlongPolicy overlong = OverlongPolicy::kSplit;
  uint64_t seed = 0;
  bool one_per_sequence = false;  // data.packing = none: no two documents share a sequence
};

struct PackingStats {
  uint64_t documents = 0;        // documents given (empty ones are ignored)
  uint64_t split_documents = 0;  // over-long documents cut into pieces
  uint64_t truncated_documents = 0;
  uint64_t dropped_documents = 0;
  uint64_t sequences = 0;
  uint64_t content_tokens = 0;  // document tokens written, separators included
  uint64_t trained_tokens = 0;  // tokens with mask 1
  uint64_t padding_tokens = 0;
};

struct PackedTokens {
  std::vector<uint32_t> tokens;           // (sequences * seq_len)
  std::vector<uint8_t> mask;              // (sequences * seq_len)
  std::vector<uint64_t> document_starts;  // increasing, from 0: where each piece begins
  PackingStats stats;
};

// The tokens `document` takes in a sequence: its ids plus the EOS separator unless it ends with
// one.
size_t packed_length(const TokenizedDocument& document, int32_t eos_id);

PackedTokens pack_documents(const std::vector<TokenizedDocument>& documents,
                            const PackingOptions& options);

}  // namespace shardtrain
