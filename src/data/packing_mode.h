// PackingMode: how the documents of a training sequence relate to each other (`data.packing`,
// `prepare --packing`; docs/data.md "Packing modes").
//   documents:   several documents share a sequence, but each attends only to itself: rope
//                positions restart at 0 at every document and the first token of a document is
//                never a target (data/batch.h carries the boundaries to the attention mask);
//   concatenate: documents are packed the same way but a sequence is one causal stream
//                (positions run on, tokens see the documents before them): pretraining style;
//   none:        one document per sequence, padded; a document longer than seq_len is an error
//                (unless data.overlong is truncate or drop).
// Padding never gets attention from real tokens (it only follows them) nor loss, in every mode.
#pragma once

#include <optional>
#include <string>

#include "core/choice_names.h"

namespace shardtrain {

enum class PackingMode { kDocuments, kConcatenate, kNone };

// documents, concatenate, none (`prepare --packing`).
const ChoiceNames<PackingMode>& packing_mode_names();
const char* packing_mode_name(PackingMode mode);

// data.packing and `eval --packing`: "auto" (nullopt: documents, train/training_data.h's
// with_packing_resolved) or one of the modes above.
using PackingChoice = std::optional<PackingMode>;
const ChoiceNames<PackingChoice>& packing_choice_names();

}  // namespace shardtrain
