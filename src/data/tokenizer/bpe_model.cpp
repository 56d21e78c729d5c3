#include "data/tokenizer/bpe_model.h"

#include <algorithm>
#include <array>
#include <mutex>

#include "core/error.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

// `tokenizers` caches words shorter than this many bytes; longer ones are rare and costly to keep.
constexpr size_t kMaxCachedWordBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct MergeCandidate {
  int32_t rank;
  int32_t position;  // index of the left symbol
  int32_t new_id;
};

// Heap order: the candidate with the lowest rank, then the lowest position, comes out first.
bool comes_later(const MergeCandidate& a, const MergeCandidate& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  return a.position > b.position;
}

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

bool starts_with_metaspace(std::string_view s) {
  return s.substr(0, kMetaspace.size()) == kMetaspace;
}
bool ends_with_metaspace(std::string_view s) {
  return s.size() >= kMetaspace.size() && s.substr(s.size() - kMetaspace.size()) == kMetaspace;
}

}  // namespace

// One symbol of a word being merged; a doubly linked list inside a vector.
struct BpeModel::Symbol {
  int32_t id;
  int32_t prev;    // index, -1 for none
  int32_t next;    // index, -1 for none
  int32_t length;  // bytes of the word it covers; 0 once merged into its left neighbour
};

struct BpeModel::WordCache {
  static constexpr size_t kShards = 16;
  static constexpr size_t kCapacityPerShard = 16384;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  std::array<Shard, kShards> shards;

  Shard& shard_for(std::string_view word) { return shards[StringHash{}(word) % kShards]; }
};

namespace {

// One entry of model.merges: "left right" (the older form) or ["left", "right"].
std::pair<std::string, std::string> merge_pair(const nlohmann::json& merge, size_t rank,
                                               const ConfigSite& site) {
  if (merge.is_string()) {
    const std::string& line = merge.get_ref<const std::string&>();
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      fail("{}: model.merges[{}] '{}' is not of the form \"left right\"", site.file, rank, line);
    }
    return {line.substr(0, space), line.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  fail("{}: model.merges[{}] must be \"left right\" or [\"left\", \"right\"]", site.file, rank);
}

}  // namespace

BpeModel::BpeModel() : cache_(std::make_unique<WordCache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

BpeModel BpeModel::from_json(const nlohmann::json& config, const ConfigSite& site) {
  if (!config.is_object()) {
    fail("{}: \"model\" must be a JSON object; the tokenizer.json is malformed", site.file);
  }
  const std::string type = config.contains("type") ? component_type(config, site) : "BPE";
  if (type != "BPE") {
    fail(
        "{}: model type '{}' is not supported; shardtrain's tokenizer implements BPE only "
        "(Llama 2/3, Qwen, Mistral use BPE)",
        site.file, type);
  }
  BpeModel model;
  if (const auto dropout = config.find("dropout"); dropout != config.end() && !dropout->is_null()) {
    if (!dropout->is_number()) {
      fail("{}: model.dropout must be a number or null, got {}; the tokenizer.json is malformed",
           site.file, dropout->type_name());
    }
    if (dropout->get<double>() > 0.0) {
      fail(
          "{}: model.dropout is set; BPE dropout randomizes encodings and is not supported, set "
          "it to null",
          site.file);
    }
  }
  const auto optional_string = [&](const char* key) -> std::string {
    if (!config.contains(key) || config[key].is_null()) return "";
    return string_field(config, key, site);
  };
  model.continuing_subword_prefix_ = optional_string("continuing_subword_prefix");
  model.end_of_word_suffix_ = optional_string("end_of_word_suffix");
  model.byte_fallback_ = bool_field(config, "byte_fallback", false, site);
  model.fuse_unk_ = bool_field(config, "fuse_unk", false, site);
  model.ignore_merges_ = bool_field(config, "ignore_merges", false, site);

  const auto vocab_it = config.find("vocab");
  if (vocab_it == config.end() || !vocab_it->is_object()) {
    fail("{}: model.vocab must be an object mapping token to id", site.file);
  }
  model.vocab_.reserve(vocab_it->size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab_it->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() >= kMaxTokenIdExclusive) {
      fail("{}: model.vocab[\"{}\"] = {} must be an integer id in [0, {})", site.file, token,
           id_json.dump(), kMaxTokenIdExclusive);
    }
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    model.vocab_.insert_or_assign(token, id);
    max_id = std::max(max_id, id);
  }
  model.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : model.vocab_) model.id_to_token_[id] = token;

  const std::string unk_token = optional_string("unk_token");
  if (!unk_token.empty()) {
    auto it = model.vocab_.find(unk_token);
    if (it == model.vocab_.end()) {
      fail("{}: model.unk_token '{}' is not in model.vocab", site.file, unk_token);
    }
    model.unk_id_ = it->second;
  }
  model.byte_fallback_ids_.assign(256, -1);
  for (int byte = 0; byte < 256; ++byte) {
    if (auto id = model.token_to_id(fmt::format("<0x{:02X}>", byte))) {
      model.byte_fallback_ids_[byte] = *id;
    }
  }

  const nlohmann::json& merges = array_field(config, "merges", site);
  model.merges_.reserve(merges.size());
  const size_t prefix_length = model.continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = merge_pair(merges[rank], rank, site);
    const auto left_id = model.token_to_id(left);
    const auto right_id = model.token_to_id(right);
    const std::string merged =
        left + (right.size() >= prefix_length ? right.substr(prefix_length) : right);
    const auto merged_id = model.token_to_id(merged);
    if (!left_id || !right_id || !merged_id) {
      fail("{}: model.merges[{}] ('{}' + '{}') uses a token that is not in model.vocab", site.file,
           rank, left, right);
    }
    // A repeated pair keeps its last rank, as `tokenizers` does.
    model.merges_.insert_or_assign(pair_key(*left_id, *right_id),
                                   Merge{static_cast<int32_t>(rank), *merged_id});
  }
  model.split_before_metaspace_ = can_split_before_metaspace(model, merges);
  return model;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& token = id_to_token_[id];
  return token.empty() ? nullptr : &token;
}

bool BpeModel::can_split_before_metaspace(const BpeModel& model, const nlohmann::json& merges) {
  if (model.ignore_merges_ || !model.continuing_subword_prefix_.empty() ||
      !model.end_of_word_suffix_.empty() || !model.token_to_id(kMetaspace)) {
    return false;
  }
  for (const nlohmann::json& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    if (starts_with_metaspace(right) && !ends_with_metaspace(left)) return false;
  }
  return true;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (!split_before_metaspace_) return tokenize_piece(word, ids);
  size_t begin = 0;
  for (size_t at = word.find(kMetaspace, 1); at != std::string_view::npos;
       at = word.find(kMetaspace, at + kMetaspace.size())) {
    if (ends_with_metaspace(word.substr(0, at))) continue;  // inside a run of "▁"
    tokenize_piece(word.substr(begin, at - begin), ids);
    begin = at;
  }
  tokenize_piece(word.substr(begin), ids);
}

void BpeModel::tokenize_piece(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  if (cacheable) {
    WordCache::Shard& shard = cache_->shard_for(word);
    std::lock_guard lock(shard.mutex);
    if (auto it = shard.words.find(word); it != shard.words.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  merge_word(word, ids);
  if (cacheable) {
    WordCache::Shard& shard = cache_->shard_for(word);
    std::lock_guard lock(shard.mutex);
    if (shard.words.size() < WordCache::kCapacityPerShard) {
      shard.words.try_emplace(std::string(word), ids.begin() + static_cast<ptrdiff_t>(first),
                              ids.end());
    }
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  thread_local std::vector<Symbol> symbols;
  split_into_symbols(word, symbols);
  apply_merges(symbols);
  for (const Symbol& symbol : symbols) {
    if (symbol.length != 0) ids.push_back(symbol.id);
  }
}

// Step 2 of the header: characters to initial symbols.
void BpeModel::split_into_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  thread_local std::string affixed;  // a character with prefix/suffix attached
  symbols.clear();
  const auto add_symbol = [&symbols](int32_t id, size_t length) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, static_cast<int32_t>(length)});
  };
  // An unk symbol not yet added (fuse_unk grows it): id -1 when none.
  int32_t pending_unk_id = -1;
  size_t pending_unk_length = 0;
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = decode_utf8(word, pos).length;
    std::string_view character = word.substr(pos, length);
    const bool is_first = pos == 0;
    pos += length;
    const bool is_last = pos == word.size();
    if ((!is_first && !continuing_subword_prefix_.empty()) ||
        (is_last && !end_of_word_suffix_.empty())) {
      affixed.clear();
      if (!is_first) affixed += continuing_subword_prefix_;
      affixed += character;
      if (is_last) affixed += end_of_word_suffix_;
      character = affixed;
    }
    if (auto it = vocab_.find(character); it != vocab_.end()) {
      if (pending_unk_id >= 0) {
        add_symbol(pending_unk_id, pending_unk_length);
        pending_unk_id = -1;
      }
      add_symbol(it->second, length);
      continue;
    }
    if (byte_fallback_ && std::all_of(character.begin(), character.end(), [this](char byte) {
          return byte_fallback_ids_[static_cast<uint8_t>(byte)] >= 0;
        })) {
      // As in `tokenizers`, byte tokens do not flush a pending unk first.
      for (char byte : character) add_symbol(byte_fallback_ids_[static_cast<uint8_t>(byte)], 1);
      continue;
    }
    if (unk_id_) {
      if (pending_unk_id >= 0 && fuse_unk_) {
        pending_unk_length += length;
      } else {
        if (pending_unk_id >= 0) add_symbol(pending_unk_id, pending_unk_length);
        pending_unk_id = *unk_id_;
        pending_unk_length = length;
      }
    }
  }
  if (pending_unk_id >= 0) add_symbol(pending_unk_id, pending_unk_length);
}

// Step 3 of the header: merges, lowest rank first, then leftmost.
void BpeModel::apply_merges(std::vector<Symbol>& symbols) const {
  thread_local std::vector<MergeCandidate> heap;
  heap.clear();
  const auto find_merge = [this](int32_t left, int32_t right) -> const Merge* {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  const auto push = [](MergeCandidate candidate) {
    heap.push_back(candidate);
    std::push_heap(heap.begin(), heap.end(), comes_later);
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* merge = find_merge(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back({merge->rank, static_cast<int32_t>(i), merge->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), comes_later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), comes_later);
    const MergeCandidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.position];
    if (left.length == 0 || left.next == -1) continue;
    const int32_t right_index = left.next;
    const Symbol right = symbols[right_index];
    // Skip candidates made stale by an earlier merge of either symbol.
    const Merge* current = find_merge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;

    left.id = top.new_id;
    left.length += right.length;
    left.next = right.next;
    symbols[right_index].length = 0;
    if (right.next != -1) symbols[right.next].prev = top.position;

    if (left.prev != -1) {
      if (const Merge* merge = find_merge(symbols[left.prev].id, left.id)) {
        push({merge->rank, left.prev, merge->new_id});
      }
    }
    if (left.next != -1) {
      if (const Merge* merge = find_merge(left.id, symbols[left.next].id)) {
        push({merge->rank, top.position, merge->new_id});
      }
    }
  }
}

}  // namespace shardtrain::tokenizer
