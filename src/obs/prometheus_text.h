// Prometheus text exposition format, version 0.0.4: families of gauges, counters and histograms,
// each rendered once with its HELP and TYPE lines and all of its samples.
//
//   Exposition metrics;
//   metrics.family("shardtrain_loss", "Training loss of the last step.", MetricType::kGauge)
//       .add({{"rank", "0"}}, 2.31);
//   std::string text = metrics.render();
//
// Label values are escaped (backslash, double quote, newline), HELP text too (backslash,
// newline); values print as the shortest decimal that reads back exactly, NaN and +/-Inf as
// Prometheus spells them. Histograms are given per-bucket counts and render Prometheus'
// cumulative `_bucket{le=...}` series, `_sum` and `_count`. Names and label names are checked
// (SHARDTRAIN_CHECK): they come from code, never from users. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtrain {

enum class MetricType { kGauge, kCounter, kHistogram };

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A histogram's state. counts[i] observations fell in (bounds[i-1], bounds[i]]; the last entry
// of counts (index bounds.size()) holds those above every bound.
struct HistogramValue {
  std::vector<double> bounds;    // ascending, finite
  std::vector<uint64_t> counts;  // bounds.size() + 1 entries
  double sum = 0;

  static HistogramValue with_bounds(std::vector<double> bounds);
  void observe(double value);
  uint64_t count() const;
};

class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type);

  // A gauge or counter sample. REQUIRES: type() is kGauge or kCounter.
  MetricFamily& add(MetricLabels labels, double value);
  // REQUIRES: type() is kHistogram.
  MetricFamily& add(MetricLabels labels, HistogramValue histogram);

  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  size_t sample_count() const { return samples_.size(); }
  // Appends this family's exposition (nothing when it has no samples).
  void render(std::string& out) const;

 private:
  struct Sample {
    MetricLabels labels;
    double value = 0;
    HistogramValue histogram;
  };
  std::string name_, help_;
  MetricType type_;
  std::vector<Sample> samples_;
};

class Exposition {
 public:
  // The family `name`, created on first use. REQUIRES: the same type and help on every call.
  MetricFamily& family(const std::string& name, const std::string& help, MetricType type);
  // Every family with samples, in the order first asked for.
  std::string render() const;

 private:
  std::deque<MetricFamily> families_;  // stable references
};

// Formatting pieces, exposed for the tests.
std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view help);
std::string format_metric_value(double value);
bool is_valid_metric_name(std::string_view name);  // [a-zA-Z_:][a-zA-Z0-9_:]*
bool is_valid_label_name(std::string_view name);   // [a-zA-Z_][a-zA-Z0-9_]*, not __ reserved

// The Content-Type of a rendered exposition.
inline constexpr const char* kExpositionContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace shardtrain
