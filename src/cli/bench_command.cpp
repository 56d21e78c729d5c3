// `shardtrain bench comm`: all-gather and reduce-scatter bus bandwidth of this job's collectives
// (NCCL on GPUs, Gloo on CPU), measured the way nccl-tests defines it (dist/comm_bandwidth.h).
// Run one process per GPU through the launcher:
//   shardtrain launch --nproc-per-node 8 -- bench comm
// Rank 0 prints one line per message size. A measurement, not a test.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "core/error.h"
#include "dist/comm_bandwidth.h"
#include "dist/dist_env.h"
#include "ops/device_buffer.h"

namespace shardtrain::cli {
namespace {

struct BenchCommArgs {
  DeviceChoice device = DeviceChoice::kAuto;
  double min_mib = 64, max_mib = 1024;
  int iterations = 20, warmup = 5;
};

// Message sizes measured: from 1 KiB (smaller ones are latency, not bandwidth) to 16 GiB (every
// size allocates its buffers; bus bandwidth saturates long before).
constexpr double kMinMib = 1.0 / 1024, kMaxMib = 16384;

void run_bench_comm(const BenchCommArgs& args) {
  if (!(args.min_mib >= kMinMib && args.max_mib >= args.min_mib && args.max_mib <= kMaxMib)) {
    fail("--min-mib {} / --max-mib {}: need {} <= min <= max <= {}", args.min_mib, args.max_mib,
         kMinMib, kMaxMib);
  }
  const WorkerEnv env = read_worker_env();
  CudaComputeStream compute;
  std::unique_ptr<Ops> ops = make_rank_ops(args.device, env, &compute);
  DistWorld world = connect_world(env, *ops, compute);
  Comm& comm = *world.comm;
  const int n = comm.size();
  const DType dtype = ops->activation_dtype();  // bf16 on GPUs (what FSDP gathers), f32 on CPU
  if (comm.rank() == 0) {
    std::printf("bench comm: %d ranks, %s, %s, %d iterations after %d warm-up\n", n,
                comm.backend_name().c_str(), std::string(dtype_name(dtype)).c_str(),
                args.iterations, args.warmup);
    std::printf("%12s %14s %14s %14s %14s\n", "bytes", "ag time(us)", "ag busbw GB/s",
                "rs time(us)", "rs busbw GB/s");
  }
  for (double mib = args.min_mib; mib <= args.max_mib * 1.0001; mib *= 2) {
    const auto bytes = static_cast<int64_t>(mib * 1024 * 1024);
    const CollectiveTiming gather = time_collective(comm, *ops, Collective::kAllGather, bytes,
                                                    dtype, args.warmup, args.iterations);
    const CollectiveTiming scatter = time_collective(comm, *ops, Collective::kReduceScatter, bytes,
                                                     dtype, args.warmup, args.iterations);
    if (comm.rank() == 0) {
      std::printf("%12lld %14.1f %14.1f %14.1f %14.1f\n", static_cast<long long>(gather.bytes),
                  gather.seconds * 1e6, gather.busbw_gbps, scatter.seconds * 1e6,
                  scatter.busbw_gbps);
      std::fflush(stdout);
    }
  }
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Measurements (not tests): bench comm");
  bench->require_subcommand(1);
  const auto [comm, args] = add_command<BenchCommArgs>(
      *bench, exit_code, "comm",
      "All-gather and reduce-scatter bus bandwidth (nccl-tests definition); run one "
      "process per GPU: shardtrain launch --nproc-per-node N -- bench comm",
      run_bench_comm);
  add_choice_option(comm, "--device", args->device, device_choice_names(), "cpu, cuda or auto");
  comm->add_option("--min-mib", args->min_mib, "smallest message, MiB (default 64)");
  comm->add_option("--max-mib", args->max_mib, "largest message, MiB (default 1024)");
  comm->add_option("--iterations", args->iterations, "timed calls per size")
      ->check(CLI::Range(1, 100000));
  comm->add_option("--warmup", args->warmup, "untimed calls per size first")
      ->check(CLI::Range(0, 100000));
}

}  // namespace shardtrain::cli
