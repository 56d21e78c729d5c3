// `shardtrain doctor`: whether this node (and, under the launcher with --nccl-test, the
// cluster) can train, one line per check (launch/doctor/). Exit 0 when nothing failed, 1 when
// something did, 2 for a usage error. See docs/doctor.md.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/finite_range.h"
#include "core/error.h"
#include "dist/dist_env.h"
#include "dist/nccl_build_version.h"
#include "dist/nccl_comm.h"
#include "dist/worker_env.h"
#include "io/atomic_file.h"
#include "launch/doctor/check_result.h"
#include "launch/doctor/comm_check.h"
#include "launch/doctor/node_checks.h"
#include "launch/doctor/nvml_gpu_info.h"
#include "launch/launch_config.h"
#include "launch/launcher.h"
#include "ops/backend.h"
#include "ops/cuda_build_info.h"

namespace shardtrain::cli {
namespace {

using doctor::CheckResult;
using doctor::NcclTestReport;

struct DoctorArgs {
  bool json = false;
  std::string expect_transport;
  std::string checkpoint_dir;
  std::string config_path;
  std::optional<std::string> rdzv_endpoint, rdzv_backend;
  double network_timeout_s = 5;
  bool nccl_test = false;
  doctor::CommTestOptions comm;
  std::string report_path;  // hidden: a re-executed local worker writes its report here
};

std::optional<doctor::RendezvousTarget> rendezvous_target(const DoctorArgs& args) {
  const launch::EnvLookup env = launch::process_env();
  if (!args.rdzv_endpoint && !env("PET_RDZV_ENDPOINT")) return std::nullopt;
  launch::LaunchFlags flags;  // the launcher's own parsing and defaults, PET_* included
  flags.rdzv_endpoint = args.rdzv_endpoint;
  flags.rdzv_backend = args.rdzv_backend;
  flags.command = {"doctor"};
  flags.subcommands = {"doctor"};  // resolved as this binary's own subcommand
  const launch::LaunchConfig config = launch::resolve_launch_config(flags, env);
  return doctor::RendezvousTarget{config.rdzv_backend, config.rdzv_host, config.rdzv_port,
                                  config.store_secret};
}

int print_report(const DoctorArgs& args, const std::vector<CheckResult>& checks,
                 const std::optional<NcclTestReport>& report) {
  if (args.json) {
    nlohmann::json out = nlohmann::json::parse(doctor::format_json_report(checks));
    if (report) out["nccl"] = doctor::to_json(*report);
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s", doctor::format_text_report(checks).c_str());
    if (report) std::printf("%s", doctor::format_nccl_table(*report).c_str());
  }
  std::fflush(stdout);
  return doctor::all_ok(checks) ? 0 : 1;
}

int report_checks_and_test(const DoctorArgs& args, std::vector<CheckResult> checks,
                           const NcclTestReport& report) {
  for (CheckResult& c :
       doctor::judge_nccl_report(report, doctor::parse_transport(args.expect_transport))) {
    checks.push_back(std::move(c));
  }
  return print_report(args, checks, report);
}

// One process per local GPU through the built-in launcher; rank 0 writes the report to a file
// in a directory made (and removed) here.
std::optional<NcclTestReport> run_local_workers(const DoctorArgs& args, int ranks,
                                                std::vector<CheckResult>& checks) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "shardtrain-doctor-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) fail("doctor: cannot create a directory in /tmp");
  const std::string report_path = pattern + "/nccl-report.json";
  const int code = launch::launch_local_workers(
      ranks, {"doctor", "--nccl-test", "--nccl-test-mib", std::to_string(args.comm.message_mib),
              "--comm-test-device", args.comm.device, "--nccl-test-report", report_path});
  std::optional<NcclTestReport> report;
  std::ifstream in(report_path);
  std::stringstream text;
  text << in.rdbuf();
  std::error_code ec;
  std::filesystem::remove_all(pattern, ec);
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (code != 0 || json.is_discarded()) {
    checks.push_back(doctor::fail_check(
        "nccl_test",
        "the NCCL test's " + std::to_string(ranks) + " local workers failed (exit " +
            std::to_string(code) + "); their messages are above",
        "fix what they report; NCCL_DEBUG=INFO shows NCCL's own view"));
    return std::nullopt;
  }
  return doctor::report_from_json(json);
}

// Why the NCCL test cannot run here, or "".
std::string comm_test_blocker(const DoctorArgs& args, int gpu_count) {
  if (args.comm.device == "cpu") return "";
  if (!cuda_build_info().with_cuda) return "this build has no CUDA backend (a CPU-only build)";
  if (gpu_count == 0) return "no GPU visible";
  if (!nccl_available()) return "this build has no NCCL";
  return "";
}

int run_doctor(const DoctorArgs& args) {
  const WorkerEnv env = read_worker_env();
  if (!args.report_path.empty()) {  // a re-executed local worker of run_local_workers
    return doctor::run_comm_test_rank(env, args.comm, {}, [&](const NcclTestReport& report) {
      AtomicFileWriter out(args.report_path);
      const std::string text = doctor::to_json(report).dump();
      out.write(text.data(), text.size());
      out.commit();
      return 0;
    });
  }
  std::unique_ptr<doctor::LibraryLoader> loader = doctor::make_dlopen_loader();
  std::unique_ptr<doctor::GpuInfoSource> gpus = doctor::make_driver_gpu_info(*loader);
  const doctor::SystemView view = doctor::make_host_view(*loader, *gpus);
  doctor::NodeCheckOptions options;
  options.expect = doctor::parse_transport(args.expect_transport);
  options.checkpoint_dir = args.checkpoint_dir;
  options.config_path = args.config_path;
  options.rendezvous = rendezvous_target(args);
  options.network_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.network_timeout_s * 1000));
  int gpu_count = 0;
  std::vector<CheckResult> checks;
  if (env.local_rank == 0) {  // under the launcher, one set of node checks per node
    checks =
        doctor::run_node_checks(view, cuda_build_info(), nccl_build_version(), options, &gpu_count);
  } else {
    gpu_count = visible_gpu_count();
  }
  if (!args.nccl_test) return env.local_rank == 0 ? print_report(args, checks, std::nullopt) : 0;

  if (const std::string blocker = comm_test_blocker(args, gpu_count); !blocker.empty()) {
    checks.push_back(doctor::fail_check("nccl_test", "not run: " + blocker,
                                        "run --nccl-test on a GPU node with a CUDA build of "
                                        "shardtrain and NCCL"));
    return env.local_rank == 0 ? print_report(args, checks, std::nullopt) : 1;
  }
  if (env.world == 1 && gpu_count > 1 && args.comm.device == "cuda") {
    const std::optional<NcclTestReport> report = run_local_workers(args, gpu_count, checks);
    if (!report) return print_report(args, checks, std::nullopt);
    return report_checks_and_test(args, checks, *report);
  }
  return doctor::run_comm_test_rank(env, args.comm, checks, [&](const NcclTestReport& report) {
    return report_checks_and_test(args, checks, report);
  });
}

}  // namespace

void add_doctor_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<DoctorArgs>(
      app, exit_code, "doctor",
      "Check whether this node can train (GPUs, driver, NCCL, net plugin, EFA/IB, shm, memlock, "
      "disk, rendezvous, clock): one PASS/WARN/FAIL line per check with what to do; exit 0 when "
      "nothing fails, 1 when something does. Under `shardtrain launch ... -- doctor --nccl-test` "
      "it measures the cluster. See docs/doctor.md",
      run_doctor);
  cmd->add_flag("--json", args->json,
                "print one JSON object {ok, checks: [{name, status, detail, hint}]}");
  cmd->add_option("--expect-transport", args->expect_transport,
                  "fail unless NCCL's inter-node transport is this: efa, ib or socket")
      ->check(CLI::IsMember({"efa", "ib", "socket"}));
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "check free space and permissions where checkpoints go");
  cmd->add_option("--config", args->config_path,
                  "the job's TOML config: its checkpoint size (and train.checkpoint_dir)")
      ->check(CLI::ExistingFile);
  cmd->add_option_function<std::string>(
      "--rdzv-endpoint,--rdzv_endpoint", [args](const std::string& v) { args->rdzv_endpoint = v; },
      "HOST:PORT of the rendezvous to reach (TCP store, or etcd with --rdzv-backend etcd) "
      "[PET_RDZV_ENDPOINT]");
  cmd->add_option_function<std::string>(
      "--rdzv-backend,--rdzv_backend", [args](const std::string& v) { args->rdzv_backend = v; },
      "c10d (default) or etcd [PET_RDZV_BACKEND]");
  cmd->add_option("--network-timeout", args->network_timeout_s,
                  "seconds to wait for the rendezvous endpoint (default 5)")
      ->check(finite_range(0.1, 600.0));
  cmd->add_flag("--nccl-test", args->nccl_test,
                "measure all-reduce / all-gather bus bandwidth over the local GPUs (under the "
                "launcher: over all ranks) and the transport NCCL used");
  cmd->add_option("--nccl-test-mib", args->comm.message_mib,
                  "message size of the NCCL test, MiB (default 128)")
      ->check(finite_range(1.0, 16384.0));
  cmd->add_option("--comm-test-device", args->comm.device,
                  "cuda (NCCL, default) or cpu (Gloo over CPU ranks: tests the measurement code "
                  "without GPUs)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  cmd->add_option("--nccl-test-report", args->report_path)->group("");  // internal re-exec
}

}  // namespace shardtrain::cli
