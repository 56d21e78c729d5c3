#include "obs/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace shardtrain {

nlohmann::json metrics_record(const StepReport& report) {
  nlohmann::json record = {{"step", report.step},
                           {"loss", report.loss},
                           {"lr", report.lr},
                           {"grad_norm", report.grad_norm},
                           {"tokens_per_s", report.tokens_per_s},
                           {"tokens", report.tokens_total},
                           {"elapsed_s", report.elapsed_s},
                           {"step_time_s", report.step_time_s},
                           {"data_wait_s", report.data_wait_s}};
  if (report.aux_loss) record["aux_loss"] = *report.aux_loss;
  if (report.exposed_comm_s) record["comm_wait_s"] = *report.exposed_comm_s;
  if (report.host_wait_s) record["host_wait_s"] = *report.host_wait_s;
  if (report.checkpoint_stall_s) record["checkpoint_stall_s"] = *report.checkpoint_stall_s;
  if (report.epoch) record["epoch"] = *report.epoch;
  if (report.mfu) record["mfu"] = *report.mfu;
  if (report.eval) {
    record["eval_loss"] = report.eval->loss;
    record["eval_ppl"] = report.eval->perplexity;
    record["eval_tokens"] = report.eval->targets;
    record["eval_sequences"] = report.eval->sequences;
    record["eval_time_s"] = report.eval->eval_time_s;
  }
  return record;
}

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  // Non-blocking open: a FIFO nobody reads would otherwise hold the run in open() forever
  // (POSIX: ENXIO instead). Then blocking again, so records are written whole.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENXIO) {
    fail("metrics file {}: a FIFO that no process reads; start its reader first, or pass a file",
         path);
  }
  if (fd < 0) {
    fail("cannot open metrics file {}: {}; HINT: check that its directory exists and is writable",
         path, std::strerror(errno));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ||
      (file_ = ::fdopen(fd, "a")) == nullptr) {
    const int error = errno;
    ::close(fd);
    fail("cannot open metrics file {}: {}", path, std::strerror(error));
  }
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MetricsLog::append(const nlohmann::json& record) {
  if (file_ == nullptr) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace shardtrain
