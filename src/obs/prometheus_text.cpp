#include "obs/prometheus_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace shardtrain {
namespace {

const char* type_name(MetricType type) {
  switch (type) {
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kCounter:
      return "counter";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}` with `extra` (the histogram's le) last; "" for no labels at all.
std::string label_block(const MetricLabels& labels, const std::string& extra_name = "",
                        const std::string& extra_value = "") {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  const auto append = [&](const std::string& name, const std::string& value) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    out += escape_label_value(value);
    out += '"';
  };
  for (const auto& [name, value] : labels) append(name, value);
  if (!extra_name.empty()) append(extra_name, extra_value);
  out += '}';
  return out;
}

void append_line(std::string& out, const std::string& name, const std::string& labels,
                 double value) {
  out += name;
  out += labels;
  out += ' ';
  out += format_metric_value(value);
  out += '\n';
}

}  // namespace

HistogramValue HistogramValue::with_bounds(std::vector<double> bounds) {
  SHARDTRAIN_CHECK(std::is_sorted(bounds.begin(), bounds.end()), "histogram bounds unsorted");
  HistogramValue h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void HistogramValue::observe(double value) {
  // Prometheus buckets are upper-inclusive: value <= le.
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++counts[bucket];
  sum += value;
}

uint64_t HistogramValue::count() const {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  return total;
}

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type)
    : name_(std::move(name)), help_(std::move(help)), type_(type) {
  SHARDTRAIN_CHECK(is_valid_metric_name(name_), "metric name '{}'", name_);
}

MetricFamily& MetricFamily::add(MetricLabels labels, double value) {
  SHARDTRAIN_CHECK(type_ != MetricType::kHistogram, "{} is a histogram", name_);
  for (const auto& label : labels) {
    SHARDTRAIN_CHECK(is_valid_label_name(label.first), "label name '{}'", label.first);
  }
  samples_.push_back(Sample{std::move(labels), value, {}});
  return *this;
}

MetricFamily& MetricFamily::add(MetricLabels labels, HistogramValue histogram) {
  SHARDTRAIN_CHECK(type_ == MetricType::kHistogram, "{} is not a histogram", name_);
  SHARDTRAIN_CHECK(histogram.counts.size() == histogram.bounds.size() + 1, "{} buckets", name_);
  for (const auto& label : labels) {
    SHARDTRAIN_CHECK(is_valid_label_name(label.first) && label.first != "le", "label '{}'",
                     label.first);
  }
  samples_.push_back(Sample{std::move(labels), 0, std::move(histogram)});
  return *this;
}

void MetricFamily::render(std::string& out) const {
  if (samples_.empty()) return;
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, escape_help(help_), name_,
                     type_name(type_));
  for (const Sample& s : samples_) {
    if (type_ != MetricType::kHistogram) {
      append_line(out, name_, label_block(s.labels), s.value);
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < s.histogram.bounds.size(); ++i) {
      cumulative += s.histogram.counts[i];
      append_line(out, name_ + "_bucket",
                  label_block(s.labels, "le", format_metric_value(s.histogram.bounds[i])),
                  static_cast<double>(cumulative));
    }
    const double count = static_cast<double>(s.histogram.count());
    append_line(out, name_ + "_bucket", label_block(s.labels, "le", "+Inf"), count);
    append_line(out, name_ + "_sum", label_block(s.labels), s.histogram.sum);
    append_line(out, name_ + "_count", label_block(s.labels), count);
  }
}

MetricFamily& Exposition::family(const std::string& name, const std::string& help,
                                 MetricType type) {
  for (MetricFamily& f : families_) {
    if (f.name() == name) {
      SHARDTRAIN_CHECK(f.type() == type, "family {} declared with two types", name);
      return f;
    }
  }
  return families_.emplace_back(name, help, type);
}

std::string Exposition::render() const {
  std::string out;
  for (const MetricFamily& f : families_) f.render(out);
  return out;
}

namespace {

// Exposition 0.0.4 escaping: backslash and line feed always; the double quote only inside a
// label value (HELP text keeps it as is).
std::string escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escape(value, true); }

std::string escape_help(std::string_view help) { return escape(help, false); }

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);  // shortest round-trip form
}

bool is_valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool is_valid_label_name(std::string_view name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace shardtrain
