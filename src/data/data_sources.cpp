#include "data/data_sources.h"

#include <glob.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t comma = list.find(',', begin);
    parts.push_back(trimmed(list.substr(begin, comma - begin)));
    if (comma == std::string::npos) return parts;
    begin = comma + 1;
  }
}

bool is_glob(const std::string& spec) { return spec.find_first_of("*?[") != std::string::npos; }

bool is_data_file(const fs::path& path) {
  const std::string extension = path.extension().string();
  return extension == ".jsonl" || extension == ".json" || extension == ".bin" ||
         extension == ".tokens";
}

std::vector<std::string> glob_files(const std::string& pattern, const std::string& key) {
  glob_t matches{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  if (status == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      std::error_code ec;
      if (fs::is_regular_file(matches.gl_pathv[i], ec)) files.push_back(matches.gl_pathv[i]);
    }
  }
  ::globfree(&matches);
  if (files.empty()) {
    fail("{}: no file matches '{}'; HINT: check the pattern and the directory", key, pattern);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> directory_files(const std::string& dir, const std::string& key) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && is_data_file(entry.path())) {
      files.push_back(entry.path().string());
    }
  }
  if (ec) fail("{}: cannot list directory '{}': {}", key, dir, ec.message());
  if (files.empty()) {
    fail("{}: directory '{}' holds no data files (.jsonl, .json, .bin, .tokens)", key, dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool names_several_files(const std::string& path_list) {
  std::error_code ec;
  return path_list.find(',') != std::string::npos || is_glob(path_list) ||
         fs::is_directory(path_list, ec);
}

std::vector<DataSource> expand_data_sources(const std::string& path_list, const std::string& key) {
  std::vector<DataSource> sources;
  for (const std::string& spec : split_commas(path_list)) {
    if (spec.empty()) {
      fail("{} = \"{}\": an empty source between commas; HINT: remove the extra comma", key,
           path_list);
    }
    DataSource source;
    source.spec = spec;
    std::error_code ec;
    if (is_glob(spec)) {
      source.files = glob_files(spec, key);
    } else if (fs::is_directory(spec, ec)) {
      source.files = directory_files(spec, key);
    } else if (fs::is_regular_file(spec, ec)) {
      source.files = {spec};
    } else if (fs::exists(spec, ec)) {
      fail(
          "{}: '{}' is not a regular file (a device, FIFO or socket); HINT: name a data file, a "
          "directory of them or a glob",
          key, spec);
    } else {
      fail(
          "{}: '{}' does not exist; HINT: check the path (relative paths start at the working "
          "directory)",
          key, spec);
    }
    sources.push_back(std::move(source));
  }
  return sources;
}

std::vector<double> parse_source_weights(const std::string& weights, size_t source_count) {
  if (trimmed(weights).empty()) return {};
  const std::vector<std::string> parts = split_commas(weights);
  if (parts.size() != source_count) {
    fail(
        "data.weights = \"{}\" has {} weights for {} sources in data.path; HINT: give one weight "
        "per comma-separated source",
        weights, parts.size(), source_count);
  }
  std::vector<double> out;
  for (const std::string& part : parts) {
    double value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() ||
        !std::isfinite(value) || value < 0) {
      fail("data.weights = \"{}\": '{}' is not a number >= 0", weights, part);
    }
    out.push_back(value);
  }
  if (std::all_of(out.begin(), out.end(), [](double w) { return w == 0; })) {
    fail("data.weights = \"{}\": every weight is 0, so nothing would be trained on", weights);
  }
  return out;
}

}  // namespace shardtrain
