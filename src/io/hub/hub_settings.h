// Where the Hugging Face Hub is and how to reach it: the same environment variables, defaults and
// precedence as huggingface_hub, read in one place so the rest of io/hub/ gets values passed in.
//
//   endpoint   HF_ENDPOINT, else https://huggingface.co (http:// or https://, no trailing '/')
//   cache_dir  HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
//              XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
//   token      HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), else the file HF_TOKEN_PATH, else
//              HF_HOME/token (what `hf auth login` writes); "" = anonymous
//   offline    HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE: 1/ON/YES/TRUE or 0/OFF/NO/FALSE/""
//
// Throws Error naming the variable for a value that cannot be right: an endpoint that is not an
// http(s) URL, an offline flag that is neither true nor false, a token with spaces or control
// characters (it goes into an HTTP header), a cache dir that cannot be located (no HOME).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace shardtrain {

struct HubSettings {
  std::string endpoint = "https://huggingface.co";
  std::string cache_dir;
  std::string token;
  std::string token_source;  // "HF_TOKEN" or the token file's path, for messages; "" = none
  bool offline = false;
};

// `getenv` is injectable for tests; by default the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
HubSettings hub_settings_from_env(const EnvLookup& getenv = {});

}  // namespace shardtrain
