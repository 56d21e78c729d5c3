#include "data/packing.h"

#include <map>

#include "core/error.h"
#include "data/sampler.h"

namespace shardtrain {
namespace {

// A run of tokens of one document: [begin, begin + length) of documents[document], with the
// separator as the virtual token at index ids.size().
struct Piece {
  size_t document;
  size_t begin;
  size_t length;
};

class SequenceBuilder {
 public:
  SequenceBuilder(int64_t seq_len, bool one_per_sequence)
      : seq_len_(static_cast<size_t>(seq_len)), one_per_sequence_(one_per_sequence) {}

  // Places `piece` (length <= seq_len) by best fit, or alone in a new sequence.
  void place(const Piece& piece) {
    if (one_per_sequence_) {
      sequences_.push_back({piece});
      return;
    }
    auto it = free_room_.lower_bound(piece.length);
    size_t sequence;
    size_t room;
    if (it == free_room_.end()) {
      sequence = sequences_.size();
      sequences_.emplace_back();
      room = seq_len_;
    } else {
      sequence = it->second;
      room = it->first;
      free_room_.erase(it);
    }
    sequences_[sequence].push_back(piece);
    if (room > piece.length) free_room_.emplace(room - piece.length, sequence);
  }

  const std::vector<std::vector<Piece>>& sequences() const { return sequences_; }

 private:
  size_t seq_len_;
  bool one_per_sequence_;
  std::vector<std::vector<Piece>> sequences_;
  // free room -> sequence; a multimap keeps insertion order among equal keys, so lower_bound
  // finds the earliest-opened of the tightest sequences.
  std::multimap<size_t, size_t> free_room_;
};

}  // namespace

const ChoiceNames<OverlongPolicy>& overlong_policy_names() {
  static const ChoiceNames<OverlongPolicy> names = {{"split", OverlongPolicy::kSplit},
                                                    {"truncate", OverlongPolicy::kTruncate},
                                                    {"drop", OverlongPolicy::kDrop}};
  return names;
}

size_t packed_length(const TokenizedDocument& document, int32_t eos_id) {
  const bool ends_with_eos = !document.ids.empty() && document.ids.back() == eos_id;
  return document.ids.size() + (ends_with_eos ? 0 : 1);
}

PackedTokens pack_documents(const std::vector<TokenizedDocument>& documents,
                            const PackingOptions& options) {
  SHARDTRAIN_CHECK(options.seq_len >= 2, "seq_len {}", options.seq_len);
  const size_t seq_len = static_cast<size_t>(options.seq_len);
  PackedTokens out;
  PackingStats& stats = out.stats;

  SequenceBuilder builder(options.seq_len, options.one_per_sequence);
  for (const size_t d : shuffled_indices(documents.size(), options.seed)) {
    const TokenizedDocument& document = documents[d];
    if (document.ids.empty()) continue;
    ++stats.documents;
    const size_t length = packed_length(document, options.eos_id);
    if (length <= seq_len) {
      builder.place({d, 0, length});
      continue;
    }
    switch (options.overlong) {
      case OverlongPolicy::kDrop:
        ++stats.dropped_documents;
        break;
      case OverlongPolicy::kTruncate:
        ++stats.truncated_documents;
        builder.place({d, 0, seq_len});
        break;
      case OverlongPolicy::kSplit:
        ++stats.split_documents;
        for (size_t begin = 0; begin < length; begin += seq_len) {
          builder.place({d, begin, std::min(seq_len, length - begin)});
        }
        break;
    }
  }

  const size_t total = builder.sequences().size() * seq_len;
  out.tokens.reserve(total);
  out.mask.reserve(total);
  for (const std::vector<Piece>& sequence : builder.sequences()) {
    const size_t sequence_start = out.tokens.size();
    for (const Piece& piece : sequence) {
      out.document_starts.push_back(out.tokens.size());
      const TokenizedDocument& document = documents[piece.document];
      for (size_t i = piece.begin; i < piece.begin + piece.length; ++i) {
        const bool separator = i == document.ids.size();
        const int32_t id = separator ? options.eos_id : document.ids[i];
        const bool trained =
            i != piece.begin && (separator ? document.separator_trained : document.mask[i] != 0);
        out.tokens.push_back(static_cast<uint32_t>(id));
        out.mask.push_back(trained ? 1 : 0);
        stats.trained_tokens += trained ? 1 : 0;
      }
      stats.content_tokens += piece.length;
    }
    const size_t padding = seq_len - (out.tokens.size() - sequence_start);
    out.tokens.insert(out.tokens.end(), padding, static_cast<uint32_t>(options.pad_id));
    out.mask.insert(out.mask.end(), padding, 0);
    stats.padding_tokens += padding;
  }
  stats.sequences = builder.sequences().size();
  return out;
}

}  // namespace shardtrain
