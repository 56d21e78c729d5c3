// TokenSampler (model/token_sampler.h): greedy is the first argmax; sampled tokens follow
// softmax(logits / temperature) restricted to the top-p nucleus, measured over many draws; a
// seed reproduces the same tokens; bad options are errors naming the flag.
#include "model/token_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace shardtrain {
namespace {

// Logits whose softmax at temperature 1 is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// How often each token came out of `draws` samples.
std::vector<double> frequencies(TokenSampler& sampler, const std::vector<float>& logits,
                                int draws) {
  std::vector<double> counts(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) counts.at(static_cast<size_t>(sampler.next(logits))) += 1;
  for (double& c : counts) c /= draws;
  return counts;
}

TEST(TokenSampler, GreedyPicksTheFirstLargestLogit) {
  TokenSampler greedy({.temperature = 0.0, .top_p = 0.9, .seed = 7});
  EXPECT_EQ(greedy.next(std::vector<float>{0.5f, -1.0f, 3.25f, 2.0f}), 2);
  EXPECT_EQ(greedy.next(std::vector<float>{1.0f, 4.0f, 4.0f}), 1);  // a tie: the lower id
  EXPECT_EQ(greedy.next(std::vector<float>{-3.0f}), 0);
}

TEST(TokenSampler, SamplesFollowTheSoftmax) {
  TokenSampler sampler({.temperature = 1.0, .top_p = 1.0, .seed = 1});
  const std::vector<double> f = frequencies(sampler, logits_of({0.4, 0.3, 0.2, 0.1}), 40000);
  EXPECT_NEAR(f[0], 0.4, 0.01);
  EXPECT_NEAR(f[1], 0.3, 0.01);
  EXPECT_NEAR(f[2], 0.2, 0.01);
  EXPECT_NEAR(f[3], 0.1, 0.01);
}

TEST(TokenSampler, TemperatureSharpensTheDistribution) {
  // At temperature 0.5 the probabilities go as p^2: 0.16, 0.09, 0.04, 0.01 (sum 0.30).
  TokenSampler sampler({.temperature = 0.5, .top_p = 1.0, .seed = 2});
  const std::vector<double> f = frequencies(sampler, logits_of({0.4, 0.3, 0.2, 0.1}), 40000);
  EXPECT_NEAR(f[0], 0.16 / 0.30, 0.01);
  EXPECT_NEAR(f[1], 0.09 / 0.30, 0.01);
  EXPECT_NEAR(f[2], 0.04 / 0.30, 0.01);
  EXPECT_NEAR(f[3], 0.01 / 0.30, 0.005);
}

TEST(TokenSampler, TopPKeepsTheSmallestNucleusReachingIt) {
  // Sorted 0.4, 0.3, 0.2, 0.1 (given out of order): 0.4 < 0.5, so 0.3 joins; 0.7 >= 0.5 stops.
  // Only tokens 3 and 1 come out, in the ratio 4 : 3.
  TokenSampler sampler({.temperature = 1.0, .top_p = 0.5, .seed = 3});
  const std::vector<double> f = frequencies(sampler, logits_of({0.1, 0.3, 0.2, 0.4}), 40000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[3], 4.0 / 7.0, 0.01);
  EXPECT_NEAR(f[1], 3.0 / 7.0, 0.01);
  // top_p 0 keeps the most likely token only.
  TokenSampler top1({.temperature = 1.0, .top_p = 0.0, .seed = 3});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(top1.next(logits_of({0.1, 0.3, 0.2, 0.4})), 3);
}

TEST(TokenSampler, ASeedReproducesTheSameTokens) {
  const std::vector<float> logits = logits_of({0.25, 0.25, 0.25, 0.25});
  const auto draw = [&](uint64_t seed) {
    TokenSampler sampler({.temperature = 1.0, .top_p = 1.0, .seed = seed});
    std::vector<int32_t> tokens;
    for (int i = 0; i < 16; ++i) tokens.push_back(sampler.next(logits));
    return tokens;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  // The generator and the draw are fixed (std::mt19937_64, uniform_real_distribution of
  // libstdc++): these are the tokens seed 42 gives; another sampler would change them.
  EXPECT_EQ(draw(42), (std::vector<int32_t>{3, 2, 3, 0, 3, 0, 2, 1, 1, 1, 0, 2, 2, 2, 3, 3}));
}

TEST(TokenSampler, BadOptionsNameTheFlag) {
  for (double temperature : {-0.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      TokenSampler({.temperature = temperature, .top_p = 0.9, .seed = 0});
      FAIL() << "temperature " << temperature << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("must be a finite number >= 0"), std::string::npos)
          << e.what();
    }
  }
  try {
    TokenSampler({.temperature = -0.5, .top_p = 0.9, .seed = 0});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--temperature -0.5"), std::string::npos) << e.what();
  }
  for (double top_p : {-0.1, 1.5, std::nan("")}) {
    try {
      TokenSampler({.temperature = 1.0, .top_p = top_p, .seed = 0});
      FAIL() << "top_p " << top_p << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--top-p"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace shardtrain
