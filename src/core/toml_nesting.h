// toml_nesting: how deeply a TOML text nests tables, measured on the text before toml++ parses
// it.
//
// toml++ builds a table per part of a dotted key or table header (`[a.b.c...]`, `a.b.c = 1`) and
// frees the tree recursively, so a header with 100,000 parts overflows the stack. The config
// loader refuses such a text first, in one line naming the file, line and column. The scan
// follows TOML's lexical rules (basic, literal and multi-line strings, comments, arrays and
// inline tables) in one pass, without allocating per character.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardtrain {

// Far beyond any real config (ours nest 2-3 levels) and far below what recursion can bear.
inline constexpr int kMaxTomlDepth = 64;

// "line L, column C: tables nested deeper than N levels ..." when a key path (table header
// parts + dotted key parts + enclosing inline tables) or an array/inline-table nesting exceeds
// `max_depth`; nullopt otherwise.
std::optional<std::string> toml_nesting_problem(std::string_view text,
                                                int max_depth = kMaxTomlDepth);

}  // namespace shardtrain
