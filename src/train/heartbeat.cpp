#include "train/heartbeat.h"

#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "dist/store_keys.h"
#include "dist/tcp_store.h"

namespace shardtrain {
namespace {

using namespace std::chrono_literals;

constexpr auto kPublishInterval = 250ms;

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A TCP store connection whose keys all live under a prefix (PrefixStore that owns its inner).
class ScopedTcpStore final : public Store {
 public:
  ScopedTcpStore(const std::string& host, int port, const std::string& secret, std::string prefix)
      : client_(host, port, std::chrono::minutes(5), secret), scoped_(client_, std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override { scoped_.set(key, value); }
  std::string get(const std::string& key, Duration timeout) override {
    return scoped_.get(key, timeout);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    return scoped_.try_get(key);
  }
  int64_t add(const std::string& key, int64_t delta) override { return scoped_.add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return scoped_.compare_set(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    scoped_.wait(keys, timeout);
  }
  bool remove(const std::string& key) override { return scoped_.remove(key); }
  std::string endpoint() const override { return scoped_.endpoint(); }

 private:
  TcpStoreClient client_;
  PrefixStore scoped_;
};

// Forwards to the wrapped Comm, telling the heartbeat what it waits in.
class HeartbeatComm final : public Comm {
 public:
  HeartbeatComm(std::unique_ptr<Comm> inner, Heartbeat& heartbeat)
      : inner_(std::move(inner)), heartbeat_(heartbeat) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_gather(Tensor out, Tensor in) override {
    Waiting w(*this, "all_gather");
    inner_->all_gather(out, in);
  }
  void reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    Waiting w(*this, "reduce_scatter");
    inner_->reduce_scatter(out, in, op);
  }
  void all_reduce(Tensor inout, ReduceOp op) override {
    Waiting w(*this, "all_reduce");
    inner_->all_reduce(inout, op);
  }
  void broadcast(Tensor inout, int root) override {
    Waiting w(*this, "broadcast");
    inner_->broadcast(inout, root);
  }
  void barrier() override {
    Waiting w(*this, "barrier");
    inner_->barrier();
  }
  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    Waiting w(*this, "all_to_all_v");
    inner_->all_to_all_v(out, recv_counts, in, send_counts);
  }
  // The overlapped collectives must reach the inner Comm as such: Comm's defaults would turn
  // them into blocking calls (on NCCL: enqueued on the compute stream, no overlap). On NCCL
  // they return at once, so the phase names the last collective started.
  CommWork start_all_gather(Tensor out, Tensor in) override {
    Waiting w(*this, "all_gather");
    return inner_->start_all_gather(out, in);
  }
  CommWork start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    Waiting w(*this, "reduce_scatter");
    return inner_->start_reduce_scatter(out, in, op);
  }
  CommWork start_all_reduce(Tensor inout, ReduceOp op) override {
    Waiting w(*this, "all_reduce");
    return inner_->start_all_reduce(inout, op);
  }
  void finish(CommWork work) override { inner_->finish(work); }
  std::optional<double> take_compute_wait_seconds() override {
    return inner_->take_compute_wait_seconds();
  }
  std::unique_ptr<Comm> split(int color, int key) override {
    Waiting w(*this, "split");
    return std::make_unique<HeartbeatComm>(inner_->split(color, key), heartbeat_);
  }
  std::string backend_name() const override { return inner_->backend_name(); }
  void set_context(std::string context) override {
    context_ = context;
    inner_->set_context(std::move(context));
  }

 private:
  // Marks the heartbeat "in <collective>" for its lifetime, "compute after" it afterwards.
  class Waiting {
   public:
    Waiting(HeartbeatComm& comm, const char* collective)
        : comm_(comm),
          what_(comm.context_.empty() ? std::string(collective)
                                      : std::string(collective) + ": " + comm.context_) {
      comm_.heartbeat_.set_phase(HeartbeatPhase::kInCollective, what_);
    }
    ~Waiting() { comm_.heartbeat_.set_phase(HeartbeatPhase::kAfterCollective, what_); }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    HeartbeatComm& comm_;
    std::string what_;
  };

  std::unique_ptr<Comm> inner_;
  Heartbeat& heartbeat_;
  std::string context_;
};

}  // namespace

Heartbeat::Heartbeat(std::unique_ptr<Store> store, int rank)
    : store_(std::move(store)),
      key_(store_keys::heartbeat(rank)),
      alive_key_(store_keys::heartbeat_alive(rank)) {
  if (store_) publisher_ = std::thread([this] { publish_loop(); });
}

std::unique_ptr<Heartbeat> Heartbeat::for_launched_worker(const WorkerEnv& env) {
  std::unique_ptr<Store> store;
  if (!env.store_prefix.empty() && !env.rendezvous_host().empty() && env.rendezvous_port() > 0 &&
      env.store_dir.empty() && !env.store_secret.empty()) {
    store = std::make_unique<ScopedTcpStore>(env.rendezvous_host(), env.rendezvous_port(),
                                             env.store_secret, env.store_prefix);
  }
  return std::make_unique<Heartbeat>(std::move(store), env.rank);
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

void Heartbeat::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
  phase_ = HeartbeatPhase::kStepStart;
  detail_.clear();
  unix_ms_ = unix_ms_now();
  ++version_;
}

void Heartbeat::set_phase(HeartbeatPhase phase, std::string detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  phase_ = phase;
  detail_ = std::move(detail);
  unix_ms_ = unix_ms_now();
  ++version_;
}

void Heartbeat::begin_saving(std::string what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    saving_ = std::move(what);
    unix_ms_ = unix_ms_now();
    ++version_;
    publish_now_ = true;
  }
  // At once, not at the next tick: after SIGTERM the launcher kills workers that do not say
  // they are saving within --stop-grace (launch/stop_grace.h).
  wake_.notify_all();
}

void Heartbeat::end_saving() {
  std::lock_guard<std::mutex> lock(mutex_);
  saving_.reset();
  unix_ms_ = unix_ms_now();
  ++version_;
}

void Heartbeat::note_save_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto ms = static_cast<int64_t>(seconds * 1000);
  if (ms == last_save_ms_) return;
  last_save_ms_ = ms;
  ++version_;
}

void Heartbeat::publish_loop() {
  uint64_t published = 0, ticks = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kPublishInterval, [this] { return stopping_ || publish_now_; });
    publish_now_ = false;
    if (stopping_ || step_ < 0) continue;
    // The tick says "this process runs" even while training waits; the value says progress.
    const bool changed = version_ != published;
    HeartbeatRecord record{step_, unix_ms_, phase_, last_save_ms_, detail_};
    if (saving_) {
      record.phase = HeartbeatPhase::kSaving;
      record.detail = *saving_;
    }
    const std::string value = changed ? encode_heartbeat(record) : "";
    published = version_;
    lock.unlock();
    try {
      if (changed) store_->set(key_, value);
      store_->set(alive_key_, std::to_string(++ticks));
    } catch (const Error& error) {
      // The launcher's store is gone, so the launcher is too; this worker dies with it.
      log::warn("heartbeat: cannot publish ({}); stopping heartbeats", error.what());
      return;
    }
    lock.lock();
  }
}

std::unique_ptr<Comm> with_heartbeat(std::unique_ptr<Comm> comm, Heartbeat& heartbeat) {
  return std::make_unique<HeartbeatComm>(std::move(comm), heartbeat);
}

}  // namespace shardtrain
