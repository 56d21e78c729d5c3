#include "obs/counter_continuity.h"

#include <algorithm>

namespace shardtrain {

std::vector<double> CounterContinuity::continued(const std::string& source,
                                                 const std::string& instance,
                                                 const std::vector<double>& values) {
  Source& s = sources_[source];
  const size_t n = values.size();
  if (s.offset.size() < n) s.offset.resize(n, 0.0);
  if (s.last.size() < n) s.last.resize(n, 0.0);
  if (s.instance != instance) {
    if (!s.instance.empty()) {
      for (size_t i = 0; i < n; ++i) s.offset[i] += s.last[i];
    }
    s.instance = instance;
    std::fill(s.last.begin(), s.last.end(), 0.0);
  }
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    s.last[i] = std::max(s.last[i], values[i]);
    out[i] = s.offset[i] + s.last[i];
  }
  return out;
}

}  // namespace shardtrain
