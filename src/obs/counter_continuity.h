// CounterContinuity: keeps the counters of restartable processes monotonic.
//
// A worker's counters (steps, tokens, histogram buckets) start again from zero when the
// launcher restarts it. The node's metrics endpoint feeds each source's latest values through
// continued(): when a source reports a new process instance, the last values seen from the old
// one become an offset added to everything the new instance reports, so what Prometheus scrapes
// never goes backwards within a run. A value that falls within one instance (which a correct
// process never reports) is held at its previous level. Not thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace shardtrain {

class CounterContinuity {
 public:
  // `source` names the slot (e.g. "local_rank 1"); `instance` identifies the reporting process;
  // `values` are its counters in a fixed order (the order must not change for a source).
  // Returns the continued values: offset from earlier instances + the current values.
  std::vector<double> continued(const std::string& source, const std::string& instance,
                                const std::vector<double>& values);

 private:
  struct Source {
    std::string instance;
    std::vector<double> last;    // the current instance's latest values
    std::vector<double> offset;  // sum of the final values of earlier instances
  };
  std::map<std::string, Source> sources_;
};

}  // namespace shardtrain
