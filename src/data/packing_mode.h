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

#include <string>
#include <vector>

namespace shardtrain {

enum class PackingMode { kDocuments, kConcatenate, kNone };

// "documents" | "concatenate" | "none"; otherwise throws Error naming `key` and the choices.
PackingMode parse_packing_mode(const std::string& name, const std::string& key);
const char* packing_mode_name(PackingMode mode);
std::vector<std::string> packing_mode_choices();
// The values the data.packing key and `eval --packing` accept: "auto" (made a mode per backend
// by train/training_data.h's with_packing_for_device) and the modes above.
std::vector<std::string> packing_choices_with_auto();

}  // namespace shardtrain
