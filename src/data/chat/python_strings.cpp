#include "data/chat/python_strings.h"

#include <algorithm>

#include "core/error.h"
#include "data/chat/operators.h"

namespace shardtrain::chat {

namespace {

// Python's slice.indices(length) and the selected positions.
std::vector<size_t> slice_positions(int64_t length, const Value& start, const Value& stop,
                                    const Value& step) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  auto as_index = [](const Value& v) {
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
    return v.as_int();
  };
  const int64_t s = given(step) ? as_index(step) : 1;
  if (s == 0) fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (!given(v)) return fallback;
    int64_t i = as_index(v);
    if (i < 0) i += length;
    if (s > 0) return std::clamp<int64_t>(i, 0, length);
    return std::clamp<int64_t>(i, -1, length - 1);
  };
  const int64_t first = clamp(start, s > 0 ? 0 : length - 1);
  const int64_t last = clamp(stop, s > 0 ? length : -1);
  std::vector<size_t> positions;
  for (int64_t i = first; s > 0 ? i < last : i > last; i += s) {
    positions.push_back(static_cast<size_t>(i));
  }
  return positions;
}

}  // namespace

Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step) {
  require_defined(object);
  if (object.is_list()) {
    const auto& items = object.as_list().items;
    std::vector<Value> out;
    for (size_t i : slice_positions(static_cast<int64_t>(items.size()), start, stop, step)) {
      out.push_back(items[i]);
    }
    return Value::list(std::move(out), object.as_list().is_tuple);
  }
  if (object.is_string()) {
    const std::u32string points = to_code_points(object.as_string());
    std::u32string out;
    for (size_t i : slice_positions(static_cast<int64_t>(points.size()), start, stop, step)) {
      out += points[i];
    }
    return Value::string(from_code_points(out));
  }
  fail("'{}' object is not subscriptable", object.type_name());
}

std::vector<std::string> python_split(const std::string& text, const Value& separator,
                                      int64_t max_split, bool from_right) {
  std::vector<std::string> parts;
  if (separator.is_undefined() || separator.is_none()) {
    // Runs of whitespace; leading and trailing whitespace gives no empty parts.
    std::u32string points = to_code_points(text);
    if (from_right) std::reverse(points.begin(), points.end());
    size_t i = 0;
    int64_t splits = 0;
    while (true) {
      while (i < points.size() && is_python_space(points[i])) ++i;
      if (i >= points.size()) break;
      if (max_split >= 0 && splits >= max_split) {
        parts.push_back(from_code_points(points.substr(i)));  // the far end keeps its spaces
        break;
      }
      size_t j = i;
      while (j < points.size() && !is_python_space(points[j])) ++j;
      parts.push_back(from_code_points(points.substr(i, j - i)));
      ++splits;
      i = j;
    }
    if (from_right) {
      for (auto& part : parts) {
        std::u32string p = to_code_points(part);
        std::reverse(p.begin(), p.end());
        part = from_code_points(p);
      }
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  if (!separator.is_string()) fail("str.split(): sep must be a string or None");
  const std::string& sep = separator.as_string();
  if (sep.empty()) fail("str.split(): empty separator");
  if (!from_right) {
    size_t start = 0;
    int64_t splits = 0;
    while (max_split < 0 || splits < max_split) {
      const size_t at = text.find(sep, start);
      if (at == std::string::npos) break;
      parts.push_back(text.substr(start, at - start));
      start = at + sep.size();
      ++splits;
    }
    parts.push_back(text.substr(start));
    return parts;
  }
  size_t end = text.size();
  int64_t splits = 0;
  while (max_split < 0 || splits < max_split) {
    if (end < sep.size()) break;
    const size_t at = text.rfind(sep, end - sep.size());
    if (at == std::string::npos) break;
    parts.push_back(text.substr(at + sep.size(), end - at - sep.size()));
    end = at;
    ++splits;
  }
  parts.push_back(text.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string python_strip(const std::string& text, const Value& chars, bool left, bool right) {
  const std::u32string points = to_code_points(text);
  std::u32string set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) fail("strip arg must be None or str");
    set = to_code_points(chars.as_string());
  }
  auto strip_it = [&](char32_t cp) {
    return whitespace ? is_python_space(cp) : set.find(cp) != std::u32string::npos;
  };
  size_t begin = 0;
  size_t end = points.size();
  if (left) {
    while (begin < end && strip_it(points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(points[end - 1])) --end;
  }
  return from_code_points(points.substr(begin, end - begin));
}

std::string python_replace(const std::string& text, const std::string& old_text,
                           const std::string& new_text, int64_t count, const RenderLimits& limits) {
  if (old_text.empty()) {
    // Python inserts new_text before every code point and at the end.
    const std::u32string points = to_code_points(text);
    const size_t inserts =
        count < 0 ? points.size() + 1 : std::min(points.size() + 1, static_cast<size_t>(count));
    check_string_size(text.size() + inserts * new_text.size(), limits);
    std::string out;
    for (size_t i = 0; i < points.size(); ++i) {
      if (i < inserts) out += new_text;
      out += from_code_points(points.substr(i, 1));
    }
    if (inserts > points.size()) out += new_text;
    return out;
  }
  size_t matches = 0;
  for (size_t at = text.find(old_text);
       at != std::string::npos && (count < 0 || matches < static_cast<size_t>(count));
       at = text.find(old_text, at + old_text.size())) {
    ++matches;
  }
  if (new_text.size() > old_text.size()) {
    check_string_size(text.size() + matches * (new_text.size() - old_text.size()), limits);
  }
  std::string out;
  size_t start = 0;
  for (size_t done = 0; done < matches; ++done) {
    const size_t at = text.find(old_text, start);
    out.append(text, start, at - start);
    out += new_text;
    start = at + old_text.size();
  }
  out.append(text, start, std::string::npos);
  return out;
}

std::vector<std::string> python_splitlines(const std::string& text) {
  const std::u32string points = to_code_points(text);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const char32_t c = points[i];
    const bool breaks = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c ||
                        c == 0x1d || c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) continue;
    lines.push_back(from_code_points(points.substr(start, i - start)));
    if (c == '\r' && i + 1 < points.size() && points[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < points.size()) lines.push_back(from_code_points(points.substr(start)));
  return lines;
}

}  // namespace shardtrain::chat
