#include "dist/nccl_comm.h"

#include "core/env_switch.h"
#include "core/error.h"
#include "dist/all_to_all_counts.h"
#include "dist/join_roll.h"
#include "dist/nccl_unique_id.h"

#if defined(SHARDTRAIN_WITH_NCCL)

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ops/cuda/cuda_check.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);
constexpr auto kPollPeriod = std::chrono::microseconds(200);

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    default:
      SHARDTRAIN_CHECK(false, "NcclComm: dtype {} is not supported (f32 or bf16)",
                       dtype_name(dtype));
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

void check_device_tensor(const Tensor& t, const char* collective) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "NcclComm::{} needs CUDA tensors, got {}",
                   collective, device_name(t.device()));
}

// Threads: the caller's thread makes the collectives; a watchdog thread polls them. Every NCCL
// call on the communicator is made under mutex_, so the watchdog's ncclCommAbort never races
// another call on the same communicator.
class NcclComm final : public Comm {
 public:
  // Adopts `comm` (initialised, or still initialising: non-blocking); waits until it is ready.
  // `rank` and `size` are what the caller expects (-1: not known yet), for messages only;
  // `roll` (null: none) names the ranks that never came when the init times out.
  NcclComm(ncclComm_t comm, const NcclCommOptions& options, std::string group_name, int rank,
           int size, const JoinRoll* roll = nullptr)
      : comm_(comm),
        options_(options),
        stream_(static_cast<cudaStream_t>(options.compute.stream)),
        device_(options.compute.device),
        group_name_(std::move(group_name)),
        timeout_(options.timeout),
        rank_(rank),
        size_(size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      wait_ready_locked("init", roll);
      check_locked(ncclCommUserRank(comm_, &rank_), "init", "ncclCommUserRank");
      check_locked(ncclCommCount(comm_, &size_), "init", "ncclCommCount");
    }
    SHARDTRAIN_CUDA_CHECK(cudaMalloc(&barrier_scratch_, sizeof(float)));
    SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(barrier_scratch_, 0, sizeof(float), stream_));
    // The overlap stream, at the highest priority so that communication kernels are scheduled
    // as soon as SMs free up while the compute stream is busy.
    int least_priority = 0, greatest_priority = 0;
    SHARDTRAIN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    SHARDTRAIN_CUDA_CHECK(
        cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest_priority));
    SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    stop_signal_.notify_all();
    watchdog_.join();
    // Collectives still in flight must finish before finalize.
    wait_stream("teardown", stream_);
    wait_stream("teardown", comm_stream_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      check_locked(ncclCommFinalize(comm_), "teardown", "ncclCommFinalize");
      wait_ready_locked("teardown");
      ncclCommDestroy(comm_);
    }
    for (const Pending& p : pending_) cudaEventDestroy(p.done);
    for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
    for (const auto& [id, event] : started_) cudaEventDestroy(event);
    for (cudaEvent_t event : free_work_events_) cudaEventDestroy(event);
    for (const TimedWait& wait : timed_waits_) {
      cudaEventDestroy(wait.before);
      cudaEventDestroy(wait.after);
    }
    for (cudaEvent_t event : free_timing_events_) cudaEventDestroy(event);
    cudaEventDestroy(compute_ready_);
    cudaStreamDestroy(comm_stream_);
    cudaFree(barrier_scratch_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  void set_context(std::string context) override {
    std::lock_guard<std::mutex> lock(mutex_);
    context_ = std::move(context);
  }

  void all_gather(Tensor out, Tensor in) override {
    std::lock_guard<std::mutex> lock(mutex_);
    enqueue_all_gather_locked(out, in, stream_);
  }
  void reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    enqueue_reduce_scatter_locked(out, in, op, stream_);
  }
  void all_reduce(Tensor inout, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    enqueue_all_reduce_locked(inout, op, stream_);
  }

  // Overlap: the same collectives on comm_stream_, after the compute stream's current work.
  CommWork start_all_gather(Tensor out, Tensor in) override {
    std::lock_guard<std::mutex> lock(mutex_);
    follow_compute_locked();
    enqueue_all_gather_locked(out, in, comm_stream_);
    return record_work_locked();
  }
  CommWork start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    follow_compute_locked();
    enqueue_reduce_scatter_locked(out, in, op, comm_stream_);
    return record_work_locked();
  }
  CommWork start_all_reduce(Tensor inout, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    follow_compute_locked();
    enqueue_all_reduce_locked(inout, op, comm_stream_);
    return record_work_locked();
  }
  void finish(CommWork work) override {
    if (work.id < 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = started_.find(work.id);
    SHARDTRAIN_CHECK(found != started_.end(), "NcclComm: work {} finished twice or unknown",
                     work.id);
    if (measure_waits_) {
      TimedWait wait{timing_event_locked(), nullptr};
      SHARDTRAIN_CUDA_CHECK(cudaEventRecord(wait.before, stream_));
      SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, found->second, 0));
      wait.after = timing_event_locked();
      SHARDTRAIN_CUDA_CHECK(cudaEventRecord(wait.after, stream_));
      timed_waits_.push_back(wait);
    } else {
      SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, found->second, 0));
    }
    free_work_events_.push_back(found->second);  // re-recording later is safe after the wait
    started_.erase(found);
  }

  // The waits whose closing event has been reached, in order; a wait still ahead of the
  // compute stream stays for a later call.
  std::optional<double> take_compute_wait_seconds() override {
    if (!measure_waits_) return std::nullopt;
    std::lock_guard<std::mutex> lock(mutex_);
    double seconds = 0;
    while (!timed_waits_.empty()) {
      const TimedWait& wait = timed_waits_.front();
      const cudaError_t reached = cudaEventQuery(wait.after);
      if (reached == cudaErrorNotReady) break;
      SHARDTRAIN_CUDA_CHECK(reached);
      float ms = 0;
      SHARDTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, wait.before, wait.after));
      seconds += ms / 1e3;
      free_timing_events_.push_back(wait.before);
      free_timing_events_.push_back(wait.after);
      timed_waits_.pop_front();
    }
    return seconds;
  }

  void broadcast(Tensor inout, int root) override {
    check_device_tensor(inout, "broadcast");
    SHARDTRAIN_CHECK(root >= 0 && root < size_, "broadcast root {} of {}", root, size_);
    if (inout.numel() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    check_locked(ncclBroadcast(inout.data(), inout.data(), static_cast<size_t>(inout.numel()),
                               nccl_type(inout.dtype()), root, comm_, stream_),
                 "broadcast", "ncclBroadcast");
    track_locked("broadcast", stream_);
  }

  // Grouped point-to-point calls: one send and one receive per peer with elements to move
  // (NCCL has no all-to-all-v of its own); our own slice is a device copy in the same group.
  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    check_all_to_all_counts(size_, out, recv_counts, in, send_counts);
    if (in.numel() > 0) check_device_tensor(in, "all_to_all_v");
    if (out.numel() > 0) check_device_tensor(out, "all_to_all_v");
    const DType dtype = in.numel() > 0 ? in.dtype() : out.dtype();
    const size_t element = dtype_size(dtype);
    const std::vector<int64_t> send_offsets = count_offsets(send_counts);
    const std::vector<int64_t> recv_offsets = count_offsets(recv_counts);
    char* in_bytes = static_cast<char*>(in.data());
    char* out_bytes = static_cast<char*>(out.data());
    std::lock_guard<std::mutex> lock(mutex_);
    check_locked(ncclGroupStart(), "all_to_all_v", "ncclGroupStart");
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (send_counts[peer] > 0) {
        check_locked(ncclSend(in_bytes + send_offsets[peer] * element,
                              static_cast<size_t>(send_counts[peer]), nccl_type(dtype), peer, comm_,
                              stream_),
                     "all_to_all_v", "ncclSend");
      }
      if (recv_counts[peer] > 0) {
        check_locked(ncclRecv(out_bytes + recv_offsets[peer] * element,
                              static_cast<size_t>(recv_counts[peer]), nccl_type(dtype), peer, comm_,
                              stream_),
                     "all_to_all_v", "ncclRecv");
      }
    }
    check_locked(ncclGroupEnd(), "all_to_all_v", "ncclGroupEnd");
    SHARDTRAIN_CHECK(send_counts[rank_] == recv_counts[rank_], "all_to_all_v: own slice {} vs {}",
                     send_counts[rank_], recv_counts[rank_]);
    if (send_counts[rank_] > 0) {
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(
          out_bytes + recv_offsets[rank_] * element, in_bytes + send_offsets[rank_] * element,
          static_cast<size_t>(send_counts[rank_]) * element, cudaMemcpyDeviceToDevice, stream_));
    }
    track_locked("all_to_all_v", stream_);
  }

  // A one-element all-reduce, then a host wait for it (and for everything enqueued before it
  // on the stream) under the timeout.
  void barrier() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      check_locked(ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_,
                                 stream_),
                   "barrier", "ncclAllReduce");
      track_locked("barrier", stream_);
    }
    wait_stream("barrier", stream_);
  }

  std::unique_ptr<Comm> split(int color, int key) override {
    SHARDTRAIN_CHECK(color >= 0, "split color {} must be >= 0", color);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t child = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      check_locked(ncclCommSplit(comm_, color, key, &child, &config), "split", "ncclCommSplit");
      wait_ready_locked("split");
    }
    const std::string child_name =
        group_name_ + "/split" + std::to_string(++split_count_) + "/color" + std::to_string(color);
    return std::make_unique<NcclComm>(child, options_, child_name, -1, -1);
  }

 private:
  struct Pending {
    cudaEvent_t done;
    const char* collective;
    std::string context;
    Clock::time_point enqueued;
  };

  void enqueue_all_gather_locked(Tensor out, Tensor in, cudaStream_t stream) {
    check_device_tensor(out, "all_gather");
    check_device_tensor(in, "all_gather");
    SHARDTRAIN_CHECK(out.dtype() == in.dtype(), "all_gather dtypes {} vs {}",
                     dtype_name(out.dtype()), dtype_name(in.dtype()));
    SHARDTRAIN_CHECK(out.numel() == in.numel() * size_, "all_gather sizes {} vs {} x {}",
                     out.numel(), in.numel(), size_);
    if (in.numel() == 0) return;
    // In place when `in` is our own slice of `out` (NCCL's in-place rule is the same).
    check_locked(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()),
                               nccl_type(in.dtype()), comm_, stream),
                 "all_gather", "ncclAllGather");
    track_locked("all_gather", stream);
  }

  void enqueue_reduce_scatter_locked(Tensor out, Tensor in, ReduceOp op, cudaStream_t stream) {
    check_device_tensor(out, "reduce_scatter");
    check_device_tensor(in, "reduce_scatter");
    SHARDTRAIN_CHECK(out.dtype() == in.dtype(), "reduce_scatter dtypes {} vs {}",
                     dtype_name(out.dtype()), dtype_name(in.dtype()));
    SHARDTRAIN_CHECK(in.numel() == out.numel() * size_, "reduce_scatter sizes {} vs {} x {}",
                     in.numel(), out.numel(), size_);
    if (out.numel() == 0) return;
    check_locked(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()),
                                   nccl_type(in.dtype()), nccl_op(op), comm_, stream),
                 "reduce_scatter", "ncclReduceScatter");
    track_locked("reduce_scatter", stream);
  }

  void enqueue_all_reduce_locked(Tensor inout, ReduceOp op, cudaStream_t stream) {
    check_device_tensor(inout, "all_reduce");
    if (inout.numel() == 0) return;
    check_locked(ncclAllReduce(inout.data(), inout.data(), static_cast<size_t>(inout.numel()),
                               nccl_type(inout.dtype()), nccl_op(op), comm_, stream),
                 "all_reduce", "ncclAllReduce");
    track_locked("all_reduce", stream);
  }

  // A reusable event with timing enabled (for the exposed-wait measurement).
  cudaEvent_t timing_event_locked() {
    if (!free_timing_events_.empty()) {
      const cudaEvent_t event = free_timing_events_.back();
      free_timing_events_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    SHARDTRAIN_CUDA_CHECK(cudaEventCreate(&event));
    return event;
  }

  // comm_stream_ waits for everything enqueued so far on the compute stream.
  void follow_compute_locked() {
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(compute_ready_, stream_));
    SHARDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
  }

  // An event after the collective just enqueued on comm_stream_, for finish().
  CommWork record_work_locked() {
    cudaEvent_t event = nullptr;
    if (free_work_events_.empty()) {
      SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    } else {
      event = free_work_events_.back();
      free_work_events_.pop_back();
    }
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(event, comm_stream_));
    const int64_t id = next_work_id_++;
    started_.emplace(id, event);
    return CommWork{id};
  }

  // The communicator's asynchronous state: ncclSuccess, ncclInProgress or an error.
  // REQUIRES (this and every *_locked method, and failed): mutex_ held.
  ncclResult_t async_state_locked() {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(comm_, &state);
    return status != ncclSuccess ? status : state;
  }

  // Checks an NCCL call's status; a non-blocking communicator may answer ncclInProgress, and
  // must then be polled until it is ready before the next call.
  void check_locked(ncclResult_t status, const char* collective, const char* call) {
    if (status == ncclInProgress) {
      wait_ready_locked(collective);
    } else if (status != ncclSuccess) {
      failed(collective, context_,
             std::string(call) + " returned " + ncclGetErrorString(status) + " (" +
                 ncclGetLastError(comm_) + ")");
    }
  }

  // Polls until the communicator is ready; fails on an error or at the deadline, naming the
  // ranks that never came when `roll` knows them. Holds the lock throughout: nothing else may
  // use the communicator meanwhile.
  void wait_ready_locked(const char* collective, const JoinRoll* roll = nullptr) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (;;) {
      const ncclResult_t state = async_state_locked();
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail_on_state(collective, context_, state);
      if (Clock::now() > deadline) {
        const std::string missing = roll != nullptr ? roll->describe_missing() : "";
        failed(collective, context_,
               timeout_text() + (missing.empty() ? " (did every rank get here?)"
                                                 : " (" + missing + " the group: " +
                                                       kJoinHint + ")"));
      }
      std::this_thread::sleep_for(kPollPeriod);
    }
  }

  void check_async_error_locked(const char* collective, const std::string& context) {
    const ncclResult_t state = async_state_locked();
    if (state != ncclSuccess && state != ncclInProgress) fail_on_state(collective, context, state);
  }

  [[noreturn]] void fail_on_state(const char* collective, const std::string& context,
                                  ncclResult_t state) {
    failed(collective, context,
           std::string("NCCL reported ") + ncclGetErrorString(state) + " (" +
               ncclGetLastError(comm_) + ")");
  }

  // Host wait for all work enqueued so far on the stream, polling NCCL's error state and the
  // deadline instead of blocking in cudaStreamSynchronize.
  void wait_stream(const char* collective, cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(event, stream));
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (;;) {
      const cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) break;
      if (query != cudaErrorNotReady) SHARDTRAIN_CUDA_CHECK(query);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        check_async_error_locked(collective, context_);
        if (Clock::now() > deadline) failed(collective, context_, timeout_text());
      }
      std::this_thread::sleep_for(kPollPeriod);
    }
    SHARDTRAIN_CUDA_CHECK(cudaEventDestroy(event));
  }

  // Follows the collective just enqueued on `stream` with an event the watchdog polls.
  void track_locked(const char* collective, cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    if (free_events_.empty()) {
      SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    } else {
      event = free_events_.back();
      free_events_.pop_back();
    }
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(event, stream));
    pending_.push_back({event, collective, context_, Clock::now()});
  }

  // The watchdog thread: retires completed collectives; fails on an NCCL error or when the
  // oldest pending one is older than the timeout (the caller's thread may be blocked in a CUDA
  // synchronisation that would otherwise never return).
  void watch() {
    SHARDTRAIN_CUDA_CHECK(cudaSetDevice(device_));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      stop_signal_.wait_for(lock, kWatchdogPeriod);
      while (!pending_.empty()) {
        const cudaError_t query = cudaEventQuery(pending_.front().done);
        if (query == cudaErrorNotReady) break;
        SHARDTRAIN_CUDA_CHECK(query);
        free_events_.push_back(pending_.front().done);
        pending_.pop_front();
      }
      const char* collective = pending_.empty() ? "(idle)" : pending_.front().collective;
      const std::string context = pending_.empty() ? context_ : pending_.front().context;
      check_async_error_locked(collective, context);
      if (!pending_.empty() && Clock::now() - pending_.front().enqueued > timeout_) {
        failed(collective, context, timeout_text());
      }
    }
  }

  std::string timeout_text() const {
    return "not complete after " + std::to_string(timeout_.count()) +
           " s (SHARDTRAIN_COMM_TIMEOUT_S)";
  }

  // Aborts the communicator (its kernels stop waiting for peers) and the process. NCCL
  // failures are dead peers or broken machines, not user errors (DESIGN.md "Errors").
  [[noreturn]] void failed(const char* collective, const std::string& context,
                           const std::string& reason) {
    static std::atomic<bool> failing{false};
    if (failing.exchange(true)) {  // another communicator is already reporting: let it finish
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::fprintf(stderr,
                 "shardtrain: NCCL %s failed on rank %s (rank %d of %d in group '%s', GPU %d)%s%s: "
                 "%s\nHINT: another rank probably died or is stuck: check its log first; for "
                 "network errors set NCCL_DEBUG=WARN; raise SHARDTRAIN_COMM_TIMEOUT_S only if "
                 "steps are legitimately that slow\n",
                 collective, std::to_string(options_.job_rank).c_str(), rank_, size_,
                 group_name_.c_str(), device_, context.empty() ? "" : " during ", context.c_str(),
                 reason.c_str());
    std::fflush(stderr);
    std::thread([] {  // should ncclCommAbort itself hang, the process still ends
      std::this_thread::sleep_for(std::chrono::seconds(10));
      std::abort();
    })
        .detach();
    ncclCommAbort(comm_);
    std::abort();
  }

  ncclComm_t comm_ = nullptr;
  NcclCommOptions options_;
  cudaStream_t stream_;                 // the compute stream (options_.compute)
  cudaStream_t comm_stream_ = nullptr;  // start_* collectives
  cudaEvent_t compute_ready_ = nullptr;
  int device_;
  std::string group_name_;
  std::chrono::seconds timeout_;
  int rank_, size_;
  int split_count_ = 0;
  float* barrier_scratch_ = nullptr;  // (1) f32 on the device

  std::mutex mutex_;  // guards NCCL calls on comm_ and everything below
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::string context_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::unordered_map<int64_t, cudaEvent_t> started_;  // started, not yet finished work
  // SHARDTRAIN_MEASURE_COMM_WAIT=1: events around each finish() wait on the compute stream.
  struct TimedWait {
    cudaEvent_t before, after;
  };
  const bool measure_waits_ = env_switch("SHARDTRAIN_MEASURE_COMM_WAIT", false);
  std::deque<TimedWait> timed_waits_;
  std::vector<cudaEvent_t> free_timing_events_;
  std::vector<cudaEvent_t> free_work_events_;
  int64_t next_work_id_ = 0;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Comm> make_nccl_comm(Store& store, int rank, int size, const std::string& prefix,
                                     const NcclCommOptions& options) {
  SHARDTRAIN_CHECK(size >= 1 && rank >= 0 && rank < size, "rank {} size {}", rank, size);
  SHARDTRAIN_CHECK(options.compute.device >= 0 && options.compute.stream != nullptr,
                   "NcclComm needs the CUDA backend's compute stream");
  SHARDTRAIN_CUDA_CHECK(cudaSetDevice(options.compute.device));
  JoinRoll roll(store, prefix + "/nccl", size);
  roll.mark(rank);
  const ncclUniqueId id = exchange_nccl_unique_id(store, rank, prefix, roll, options.timeout);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t status = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (status != ncclSuccess && status != ncclInProgress) {
    fail(
        "ncclCommInitRank failed on rank {} of {} (GPU {}): {} ({}); HINT: each rank needs "
        "its own GPU (LOCAL_RANK selects it); run with NCCL_DEBUG=WARN for details",
        rank, size, options.compute.device, ncclGetErrorString(status), ncclGetLastError(comm));
  }
  return std::make_unique<NcclComm>(comm, options, prefix, rank, size, &roll);
}

}  // namespace shardtrain

#else  // no NCCL in this build

namespace shardtrain {

bool nccl_available() { return false; }

std::unique_ptr<Comm> make_nccl_comm(Store& store, int rank, int size, const std::string& prefix,
                                     const NcclCommOptions&) {
  fail(
      "this shardtrain was built without NCCL, so it cannot run {} ranks on GPUs; HINT: "
      "install NCCL (libnccl-dev, or the CUDA toolkit's) and rebuild (CMake reports "
      "'shardtrain: NCCL ON'), or use --train.device=cpu",
      size);
}

}  // namespace shardtrain

#endif
