// Expert parallelism's expert half (model/layers/moe_expert_parallel.h) over a real exchange
// (fsdp/expert_exchange.h on Gloo, two ranks as threads): each rank's expert outputs and input
// gradients equal a local computation with all experts, and each rank's expert-weight
// gradients equal the sum over both ranks of the local computation's gradients for its
// experts, including when one rank receives no rows at all.
#include "fsdp/expert_exchange.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/testing/test_support.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
#include "model/layers/moe_expert_parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

constexpr int64_t kExperts = 4, kC = 8, kF = 6;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

Tensor view(std::vector<float>& v, Shape shape) { return Tensor(v.data(), DType::kF32, shape); }

// One rank's rows: rows_E[e] rows for expert e (grouped by expert), random inputs and output
// gradients; the local reference with every expert, and what expert parallelism gives.
void check_rank(Comm& comm, const std::vector<int64_t>& rows_E) {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  const int me = comm.rank();
  int64_t M = 0;
  for (int64_t n : rows_E) M += n;
  // The same weights on both ranks; inputs differ by rank.
  std::vector<float> gate = random_values(kExperts * kF * kC, 1),
                     up = random_values(kExperts * kF * kC, 2),
                     down = random_values(kExperts * kC * kF, 3);
  std::vector<float> x = random_values(M * kC, 10 + me), dy = random_values(M * kC, 20 + me);
  const Tensor gate_EFC = view(gate, {kExperts, kF, kC}), up_EFC = view(up, {kExperts, kF, kC});
  const Tensor down_ECF = view(down, {kExperts, kC, kF});

  // Local reference: every expert here.
  std::vector<float> g(M * kF), u(M * kF), a(M * kF), y(M * kC);
  std::vector<float> da(M * kF), dg(M * kF), du(M * kF), dx(M * kC);
  std::vector<float> dgate(gate.size()), dup(up.size()), ddown(down.size());
  if (M > 0) {
    ops->grouped_linear_forward(view(x, {M, kC}), gate_EFC, rows_E, view(g, {M, kF}));
    ops->grouped_linear_forward(view(x, {M, kC}), up_EFC, rows_E, view(u, {M, kF}));
    ops->swiglu_forward(view(g, {M, kF}), view(u, {M, kF}), view(a, {M, kF}));
    ops->grouped_linear_forward(view(a, {M, kF}), down_ECF, rows_E, view(y, {M, kC}));
  }
  ops->grouped_linear_backward(view(dy, {M, kC}), view(a, {M, kF}), down_ECF, rows_E,
                               view(da, {M, kF}), view(ddown, {kExperts, kC, kF}), false, false);
  if (M > 0) {
    ops->swiglu_backward(view(da, {M, kF}), view(g, {M, kF}), view(u, {M, kF}), view(dg, {M, kF}),
                         view(du, {M, kF}));
  }
  ops->grouped_linear_backward(view(dg, {M, kF}), view(x, {M, kC}), gate_EFC, rows_E,
                               view(dx, {M, kC}), view(dgate, {kExperts, kF, kC}), false, false);
  ops->grouped_linear_backward(view(du, {M, kF}), view(x, {M, kC}), up_EFC, rows_E,
                               view(dx, {M, kC}), view(dup, {kExperts, kF, kC}), true, false);
  // The experts' gradients over both ranks' rows.
  for (std::vector<float>* grad : {&dgate, &dup, &ddown}) {
    comm.all_reduce(view(*grad, {static_cast<int64_t>(grad->size())}), ReduceOp::kSum);
  }

  // Expert parallelism: this rank holds experts [me * 2, me * 2 + 2).
  const int64_t local = kExperts / 2;
  MoeWeights w, grads;
  w.gate_EFC = Tensor(gate.data() + me * local * kF * kC, DType::kF32, {local, kF, kC});
  w.up_EFC = Tensor(up.data() + me * local * kF * kC, DType::kF32, {local, kF, kC});
  w.down_ECF = Tensor(down.data() + me * local * kC * kF, DType::kF32, {local, kC, kF});
  std::vector<float> ep_dgate(local * kF * kC, 7.0f), ep_dup(local * kF * kC, 7.0f),
      ep_ddown(local * kC * kF, 7.0f);  // overwritten (accumulate = false)
  grads.gate_EFC = view(ep_dgate, {local, kF, kC});
  grads.up_EFC = view(ep_dup, {local, kF, kC});
  grads.down_ECF = view(ep_ddown, {local, kC, kF});
  ExpertExchange exchange(comm, *ops);
  ExpertRowsSaved saved;
  ExpertRowsScratch scratch;
  std::vector<float> ep_y(M * kC, -1.0f), ep_dx(M * kC, -1.0f);
  MoeExpertParallel::forward(*ops, w, rows_E, view(x, {M, kC}), exchange, saved, scratch,
                             view(ep_y, {M, kC}));
  MoeExpertParallel::backward(*ops, w, grads, false, view(dy, {M, kC}), exchange, saved, scratch,
                              view(ep_dx, {M, kC}));
  const auto expect_near = [&](const std::vector<float>& got, const float* want, const char* what) {
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])))
          << "rank " << me << " " << what << " element " << i;
    }
  };
  expect_near(ep_y, y.data(), "y");
  expect_near(ep_dx, dx.data(), "dx");
  expect_near(ep_dgate, dgate.data() + me * local * kF * kC, "dgate");
  expect_near(ep_dup, dup.data() + me * local * kF * kC, "dup");
  expect_near(ep_ddown, ddown.data() + me * local * kC * kF, "ddown");
}

void run_two_ranks(const std::vector<int64_t>& rows_rank0, const std::vector<int64_t>& rows_rank1) {
  testing::TempDir dir("shardtrain_expert_exchange_");
  FileStore store(dir.path());
  testing::run_threads(2, [&](int rank) {
    std::unique_ptr<Comm> comm = make_gloo_comm(store, rank, 2, "experts");
    check_rank(*comm, rank == 0 ? rows_rank0 : rows_rank1);
  });
}

TEST(ExpertExchange, RowsReachTheirExpertsAndGradientsSumOverTheSendingRanks) {
  run_two_ranks({3, 1, 0, 2}, {1, 2, 4, 1});
}

TEST(ExpertExchange, ARankThatReceivesNoRowsStillJoinsAndZeroesItsGradients) {
  // Every row goes to rank 0's experts (0 and 1): rank 1 receives nothing.
  run_two_ranks({2, 3, 0, 0}, {1, 0, 0, 0});
}

}  // namespace
}  // namespace shardtrain
