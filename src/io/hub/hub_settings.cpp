#include "io/hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace shardtrain {
namespace {

// A token file longer than this is not a token file.
constexpr size_t kMaxTokenBytes = 4096;

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

bool offline_flag(const std::string& name, const std::string& value) {
  const std::string v = upper(value);
  if (v == "1" || v == "ON" || v == "YES" || v == "TRUE") return true;
  if (v.empty() || v == "0" || v == "OFF" || v == "NO" || v == "FALSE") return false;
  fail("{}={}: not a yes/no value; HINT: set it to 1 (use only the local cache) or 0", name,
       value.substr(0, 40));
}

std::string stripped(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t begin = 0;
  while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  return text.substr(begin);
}

void check_token(const std::string& token, const std::string& source) {
  for (const char c : token) {
    if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f) {
      fail(
          "the Hugging Face token from {} contains spaces or control characters; HINT: put "
          "only the token (hf_...) there",
          source);
    }
  }
}

std::string read_token_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  if (std::filesystem::file_size(path, ec) > kMaxTokenBytes) {
    fail("the token file {} is larger than {} bytes; HINT: it should hold only the token", path,
         kMaxTokenBytes);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return stripped(text.str());
}

}  // namespace

HubSettings hub_settings_from_env(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup(process_env);
  const auto value_of = [&](const std::string& name) { return env(name).value_or(""); };
  HubSettings s;

  if (const std::string endpoint = value_of("HF_ENDPOINT"); !endpoint.empty()) {
    if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0) {
      fail("HF_ENDPOINT={}: not an http:// or https:// URL; HINT: unset it for the public Hub",
           endpoint.substr(0, 80));
    }
    s.endpoint = endpoint;
    while (s.endpoint.size() > 8 && s.endpoint.back() == '/') s.endpoint.pop_back();
  }

  std::string home = value_of("HF_HOME");
  if (home.empty()) {
    std::string base = value_of("XDG_CACHE_HOME");
    if (base.empty()) {
      const std::string user_home = value_of("HOME");
      if (!user_home.empty()) base = user_home + "/.cache";
    }
    if (!base.empty()) home = base + "/huggingface";
  }
  s.cache_dir = value_of("HF_HUB_CACHE");
  if (s.cache_dir.empty()) s.cache_dir = value_of("HUGGINGFACE_HUB_CACHE");
  if (s.cache_dir.empty() && !home.empty()) s.cache_dir = home + "/hub";
  if (s.cache_dir.empty()) {
    fail(
        "cannot locate the Hugging Face cache: HF_HUB_CACHE, HF_HOME and HOME are all unset; "
        "HINT: set HF_HUB_CACHE to a directory");
  }

  for (const char* name : {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}) {
    if (const auto v = env(name)) s.offline = s.offline || offline_flag(name, *v);
  }

  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    const std::string token = stripped(value_of(name));
    if (!token.empty()) {
      s.token = token;
      s.token_source = name;
      break;
    }
  }
  if (s.token.empty()) {
    std::string path = value_of("HF_TOKEN_PATH");
    if (path.empty() && !home.empty()) path = home + "/token";
    if (!path.empty()) {
      s.token = read_token_file(path);
      if (!s.token.empty()) s.token_source = path;
    }
  }
  if (!s.token.empty()) check_token(s.token, s.token_source);
  return s;
}

}  // namespace shardtrain
