#include "obs/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "obs/counter_continuity.h"

namespace shardtrain {
namespace {

TEST(PrometheusText, GaugeFamilyHasHelpTypeAndOneLinePerSample) {
  Exposition e;
  e.family("shardtrain_loss", "Training loss.", MetricType::kGauge)
      .add({{"rank", "0"}}, 2.5)
      .add({{"rank", "1"}}, 0.125);
  EXPECT_EQ(e.render(),
            "# HELP shardtrain_loss Training loss.\n"
            "# TYPE shardtrain_loss gauge\n"
            "shardtrain_loss{rank=\"0\"} 2.5\n"
            "shardtrain_loss{rank=\"1\"} 0.125\n");
}

TEST(PrometheusText, SameFamilyAskedTwiceRendersOnce) {
  Exposition e;
  e.family("a_total", "A.", MetricType::kCounter).add({{"x", "1"}}, 1);
  e.family("b", "B.", MetricType::kGauge).add({}, 7);
  e.family("a_total", "A.", MetricType::kCounter).add({{"x", "2"}}, 2);
  EXPECT_EQ(e.render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"2\"} 2\n"
            "# HELP b B.\n# TYPE b gauge\nb 7\n");
}

TEST(PrometheusText, EmptyFamilyIsLeftOut) {
  Exposition e;
  e.family("unused", "Nothing.", MetricType::kGauge);
  EXPECT_EQ(e.render(), "");
}

TEST(PrometheusText, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
  Exposition e;
  e.family("m", "Line one\nline two.", MetricType::kGauge).add({{"pod", "we\"ird\\"}}, 1);
  EXPECT_EQ(e.render(),
            "# HELP m Line one\\nline two.\n# TYPE m gauge\nm{pod=\"we\\\"ird\\\\\"} 1\n");
}

TEST(PrometheusText, ValuesUseShortestExactFormAndPrometheusSpecials) {
  EXPECT_EQ(format_metric_value(3), "3");
  EXPECT_EQ(format_metric_value(0.1), "0.1");
  EXPECT_EQ(format_metric_value(1e21), "1e+21");
  EXPECT_EQ(format_metric_value(123456789012), "123456789012");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  HistogramValue h = HistogramValue::with_bounds({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 2.0, 3.0, 100.0}) h.observe(v);
  // 0.1 lands in le="0.1" (upper bounds are inclusive).
  EXPECT_EQ(h.counts, (std::vector<uint64_t>{2, 1, 2, 1}));
  EXPECT_EQ(h.count(), 6u);
  Exposition e;
  e.family("step_seconds", "Steps.", MetricType::kHistogram).add({{"rank", "0"}}, h);
  EXPECT_EQ(e.render(),
            "# HELP step_seconds Steps.\n"
            "# TYPE step_seconds histogram\n"
            "step_seconds_bucket{rank=\"0\",le=\"0.1\"} 2\n"
            "step_seconds_bucket{rank=\"0\",le=\"1\"} 3\n"
            "step_seconds_bucket{rank=\"0\",le=\"10\"} 5\n"
            "step_seconds_bucket{rank=\"0\",le=\"+Inf\"} 6\n"
            "step_seconds_sum{rank=\"0\"} 105.65\n"
            "step_seconds_count{rank=\"0\"} 6\n");
}

TEST(PrometheusText, NamesAreValidated) {
  EXPECT_TRUE(is_valid_metric_name("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_TRUE(is_valid_metric_name("a:b_c9"));
  EXPECT_FALSE(is_valid_metric_name("9lives"));
  EXPECT_FALSE(is_valid_metric_name("has-dash"));
  EXPECT_FALSE(is_valid_metric_name(""));
  EXPECT_TRUE(is_valid_label_name("modelName"));
  EXPECT_FALSE(is_valid_label_name("__name__"));
  EXPECT_FALSE(is_valid_label_name("a:b"));
}

TEST(CounterContinuity, RestartedInstanceContinuesFromTheLastValueSeen) {
  CounterContinuity c;
  EXPECT_EQ(c.continued("r0", "pid1", {5, 100}), (std::vector<double>{5, 100}));
  EXPECT_EQ(c.continued("r0", "pid1", {8, 160}), (std::vector<double>{8, 160}));
  // The worker restarted: its own counters are small again, the exposed ones keep growing.
  EXPECT_EQ(c.continued("r0", "pid2", {1, 20}), (std::vector<double>{9, 180}));
  EXPECT_EQ(c.continued("r0", "pid2", {3, 60}), (std::vector<double>{11, 220}));
  // A second restart adds the second instance's last values too.
  EXPECT_EQ(c.continued("r0", "pid3", {0, 0}), (std::vector<double>{11, 220}));
  // Sources are independent.
  EXPECT_EQ(c.continued("r1", "pidA", {2, 2}), (std::vector<double>{2, 2}));
}

TEST(CounterContinuity, NeverFallsWithinOneInstance) {
  CounterContinuity c;
  c.continued("r0", "p", {10});
  EXPECT_EQ(c.continued("r0", "p", {4}), (std::vector<double>{10}));
  EXPECT_EQ(c.continued("r0", "p", {12}), (std::vector<double>{12}));
}

}  // namespace
}  // namespace shardtrain
