// Tests of packing arithmetic (data/packing.h): separators, padding, over-long policies, best
// fit and determinism.
#include "data/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace shardtrain {
namespace {

constexpr int32_t kEos = 100;
constexpr int32_t kPad = 101;

TokenizedDocument document(std::vector<int32_t> ids, bool separator_trained = true) {
  TokenizedDocument out;
  out.mask.assign(ids.size(), 1);
  out.mask[0] = 0;
  out.ids = std::move(ids);
  out.separator_trained = separator_trained;
  return out;
}

PackingOptions options(int64_t seq_len, OverlongPolicy overlong = OverlongPolicy::kSplit) {
  PackingOptions out;
  out.seq_len = seq_len;
  out.eos_id = kEos;
  out.pad_id = kPad;
  out.overlong = overlong;
  out.seed = 7;
  return out;
}

std::vector<int32_t> iota_ids(int32_t first, int32_t count) {
  std::vector<int32_t> ids(count);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

TEST(Packing, SeparatorThenPaddingMaskedOut) {
  const PackedTokens packed = pack_documents({document({1, 2, 3})}, options(8));
  EXPECT_EQ(packed.tokens, (std::vector<uint32_t>{1, 2, 3, kEos, kPad, kPad, kPad, kPad}));
  EXPECT_EQ(packed.mask, (std::vector<uint8_t>{0, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(packed.stats.sequences, 1u);
  EXPECT_EQ(packed.stats.content_tokens, 4u);
  EXPECT_EQ(packed.stats.trained_tokens, 3u);
  EXPECT_EQ(packed.stats.padding_tokens, 4u);
}

TEST(Packing, UntrainedSeparatorAndExistingEos) {
  const PackedTokens chat = pack_documents({document({1, 2}, false)}, options(4));
  EXPECT_EQ(chat.tokens, (std::vector<uint32_t>{1, 2, kEos, kPad}));
  EXPECT_EQ(chat.mask, (std::vector<uint8_t>{0, 1, 0, 0}));
  // A document that already ends with EOS gets no second one.
  const PackedTokens ended = pack_documents({document({1, kEos})}, options(4));
  EXPECT_EQ(ended.tokens, (std::vector<uint32_t>{1, kEos, kPad, kPad}));
  EXPECT_EQ(ended.stats.content_tokens, 2u);
}

TEST(Packing, OverlongSplitIntoFullPiecesAndARemainder) {
  // 10 ids + separator = 11 tokens at seq_len 4: pieces of 4, 4 and 3.
  const PackedTokens packed = pack_documents({document(iota_ids(1, 10))}, options(4));
  EXPECT_EQ(packed.tokens, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, kEos, kPad}));
  EXPECT_EQ(packed.mask, (std::vector<uint8_t>{0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(packed.stats.split_documents, 1u);
  EXPECT_EQ(packed.stats.sequences, 3u);
  EXPECT_EQ(packed.stats.padding_tokens, 1u);
}

TEST(Packing, OverlongTruncateAndDrop) {
  const PackedTokens truncated =
      pack_documents({document(iota_ids(1, 10))}, options(4, OverlongPolicy::kTruncate));
  EXPECT_EQ(truncated.tokens, (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(truncated.stats.truncated_documents, 1u);

  const PackedTokens dropped = pack_documents({document(iota_ids(1, 10)), document({50, 51})},
                                              options(4, OverlongPolicy::kDrop));
  EXPECT_EQ(dropped.tokens, (std::vector<uint32_t>{50, 51, kEos, kPad}));
  EXPECT_EQ(dropped.stats.dropped_documents, 1u);
  EXPECT_EQ(dropped.stats.documents, 2u);
  // A document of exactly seq_len tokens with its separator is not over-long.
  const PackedTokens exact =
      pack_documents({document({1, 2, 3})}, options(4, OverlongPolicy::kDrop));
  EXPECT_EQ(exact.tokens, (std::vector<uint32_t>{1, 2, 3, kEos}));
  EXPECT_EQ(exact.stats.padding_tokens, 0u);
}

TEST(Packing, DocumentsNeverCrossSequencesAndFitTightly) {
  // Lengths with separators 5 and 3 fill one sequence of 8 in either order.
  const PackedTokens two = pack_documents({document({1, 2, 3, 4}), document({5, 6})}, options(8));
  EXPECT_EQ(two.stats.sequences, 1u);
  EXPECT_EQ(two.stats.padding_tokens, 0u);
  // Four documents of 4 tokens: two per sequence, whatever the order.
  const PackedTokens four = pack_documents(
      {document({1, 2, 3}), document({4, 5, 6}), document({7, 8, 9}), document({10, 11, 12})},
      options(8));
  EXPECT_EQ(four.stats.sequences, 2u);
  EXPECT_EQ(four.stats.padding_tokens, 0u);
  // Each document is whole inside one sequence: every sequence holds two separators.
  for (size_t start : {0u, 8u}) {
    const std::vector<uint32_t> sequence(four.tokens.begin() + start,
                                         four.tokens.begin() + start + 8);
    EXPECT_EQ(std::count(sequence.begin(), sequence.end(), static_cast<uint32_t>(kEos)), 2);
  }
}

TEST(Packing, SameSeedSameOutputOtherSeedOtherOrder) {
  std::vector<TokenizedDocument> documents;
  for (int32_t d = 0; d < 50; ++d) documents.push_back(document(iota_ids(d * 10, 1 + d % 7)));
  PackingOptions a = options(16);
  const PackedTokens first = pack_documents(documents, a);
  const PackedTokens again = pack_documents(documents, a);
  EXPECT_EQ(first.tokens, again.tokens);
  EXPECT_EQ(first.mask, again.mask);
  a.seed = 8;
  EXPECT_NE(pack_documents(documents, a).tokens, first.tokens);
  EXPECT_EQ(first.tokens.size() % 16, 0u);
  EXPECT_EQ(first.stats.content_tokens + first.stats.padding_tokens, first.tokens.size());
}

TEST(Packing, RecordsWhereEveryDocumentAndPieceBegins) {
  // Lengths with separators 5 and 3 share one sequence of 8.
  const PackedTokens two = pack_documents({document({1, 2, 3, 4}), document({5, 6})}, options(8));
  ASSERT_EQ(two.document_starts.size(), 2u);
  EXPECT_EQ(two.document_starts[0], 0u);
  const uint64_t second = two.document_starts[1];
  EXPECT_TRUE(second == 3 || second == 5) << second;  // whichever the shuffle placed first
  EXPECT_EQ(two.mask[second], 0) << "a document's first token is never a target";
  // Split pieces are documents of their own: 11 tokens at seq_len 4 -> starts 0, 4, 8.
  const PackedTokens split = pack_documents({document(iota_ids(1, 10))}, options(4));
  EXPECT_EQ(split.document_starts, (std::vector<uint64_t>{0, 4, 8}));
  // Every sequence begins a document, so the windows of the token file never start mid-piece.
  const PackedTokens four = pack_documents(
      {document({1, 2, 3}), document({4, 5, 6}), document({7, 8, 9}), document({10, 11, 12})},
      options(8));
  EXPECT_EQ(four.document_starts, (std::vector<uint64_t>{0, 4, 8, 12}));
}

TEST(Packing, OnePerSequencePadsEachDocumentAlone) {
  PackingOptions none = options(8);
  none.one_per_sequence = true;
  const PackedTokens packed = pack_documents({document({1, 2, 3, 4}), document({5, 6})}, none);
  EXPECT_EQ(packed.stats.sequences, 2u) << "best fit would have put both in one";
  EXPECT_EQ(packed.document_starts, (std::vector<uint64_t>{0, 8}));
  EXPECT_EQ(packed.stats.padding_tokens, 8u);
  // Each sequence: one document, its separator, then padding with mask 0.
  for (size_t start : {0u, 8u}) {
    const std::vector<uint32_t> sequence(packed.tokens.begin() + start,
                                         packed.tokens.begin() + start + 8);
    EXPECT_EQ(std::count(sequence.begin(), sequence.end(), static_cast<uint32_t>(kEos)), 1);
    EXPECT_EQ(sequence.back(), static_cast<uint32_t>(kPad));
  }
  EXPECT_EQ(packed_length(document({1, 2, 3}), kEos), 4u);
  EXPECT_EQ(packed_length(document({1, kEos}), kEos), 2u);
}

TEST(Packing, PolicyNames) {
  EXPECT_EQ(parse_choice(overlong_policy_names(), "split", "data.overlong"),
            OverlongPolicy::kSplit);
  EXPECT_EQ(parse_choice(overlong_policy_names(), "drop", "data.overlong"), OverlongPolicy::kDrop);
  EXPECT_THROW(parse_choice(overlong_policy_names(), "chop", "data.overlong"), Error);
}

}  // namespace
}  // namespace shardtrain
