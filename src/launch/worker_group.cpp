#include "launch/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"

extern char** environ;

namespace shardtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Longest partial line held back; a longer run without '\n' is written as a line of its own.
constexpr size_t kMaxLineBytes = 64 * 1024;

void write_fully(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // our own output is gone (closed pipe); keep supervising regardless
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string describe_exit(int global_rank, int wait_status) {
  if (WIFEXITED(wait_status)) {
    return "rank " + std::to_string(global_rank) + " exited with code " +
           std::to_string(WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* abbrev = ::sigabbrev_np(sig);
    return "rank " + std::to_string(global_rank) + " was killed by signal " + std::to_string(sig) +
           " (SIG" + (abbrev != nullptr ? abbrev : "?") + ")";
  }
  return "rank " + std::to_string(global_rank) + " ended with wait status " +
         std::to_string(wait_status);
}

// Lines of a stream kept off the console that a failure report shows.
constexpr size_t kTailLines = 20;

// One output pipe of a worker and its unfinished last line.
struct OutputStream {
  int fd = -1;        // read end; -1 once at EOF
  int target_fd = 1;  // the agent's stdout or stderr
  bool console = true;
  int file_fd = -1;  // the log file, or -1
  std::string partial;
  std::deque<std::string> tail;  // last lines kept off the console
};

// The message of a torchelastic error file ({"message": {"message": "...", ...}} or
// {"message": "..."}), "" when absent or unreadable.
std::string error_file_message(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in) return "";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) return "";
  const nlohmann::json& m = j["message"];
  std::string text;
  if (m.is_string()) text = m.get<std::string>();
  if (m.is_object() && m.contains("message") && m["message"].is_string()) {
    text = m["message"].get<std::string>();
  }
  const auto newline = text.find('\n');
  return text.substr(0, std::min<size_t>(newline, 500));
}

struct WorkerGroup::Worker {
  int global_rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int wait_status = 0;
  std::string prefix;
  std::string error_file;
  OutputStream streams[2];

  // Routes each complete line of `partial` (all of it when `flush`).
  void emit(OutputStream& s, bool flush) {
    std::string console, file;
    const auto route = [&](std::string_view line) {  // line ends with '\n'
      if (s.console) {
        console += prefix;
        console += line;
      } else {
        s.tail.emplace_back(line);
        if (s.tail.size() > kTailLines) s.tail.pop_front();
      }
      if (s.file_fd >= 0) file += line;
    };
    size_t start = 0;
    while (true) {
      const size_t newline = s.partial.find('\n', start);
      if (newline == std::string::npos) break;
      route(std::string_view(s.partial).substr(start, newline + 1 - start));
      start = newline + 1;
    }
    s.partial.erase(0, start);
    if (!s.partial.empty() && (flush || s.partial.size() > kMaxLineBytes)) {
      route(s.partial + "\n");
      s.partial.clear();
    }
    if (!console.empty()) write_fully(s.target_fd, console);
    if (!file.empty()) write_fully(s.file_fd, file);
  }
};

std::string WorkerGroup::failure_output() const {
  if (failed_worker_ == nullptr) return "";
  std::string out;
  const auto append_tail = [&out](const Worker& w) {
    for (const OutputStream& s : w.streams) {
      for (const std::string& line : s.tail) out += w.prefix + line;
    }
  };
  append_tail(*failed_worker_);
  // Another hidden rank that failed on its own often holds the reason (the first to exit may
  // only report that a peer failed).
  for (const auto& w : workers_) {
    const bool failed_itself = WIFEXITED(w->wait_status) && WEXITSTATUS(w->wait_status) != 0;
    if (w.get() != failed_worker_ && w->exited && failed_itself) append_tail(*w);
  }
  return out;
}

WorkerGroup::WorkerGroup(const std::vector<std::string>& command,
                         const std::vector<WorkerSpec>& specs) {
  SHARDTRAIN_CHECK(!command.empty());
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  for (const WorkerSpec& spec : specs) {
    // Everything the child needs is built before fork: after fork, a multithreaded parent's
    // child may only make async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (spec.env.find(name) == spec.env.end()) env_strings.push_back(entry);
    }
    for (const auto& [name, value] : spec.env) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);

    // The log files first: a failure here leaves no process behind.
    int log_fds[2] = {-1, -1};
    const StreamRoute* routes[2] = {&spec.out, &spec.err};
    for (int i = 0; i < 2; ++i) {
      if (routes[i]->file.empty()) continue;
      log_fds[i] = ::open(routes[i]->file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log_fds[i] < 0) {
        const std::string reason = std::strerror(errno);
        if (i == 1 && log_fds[0] >= 0) ::close(log_fds[0]);
        fail("cannot write worker log {}: {}; HINT: check --log-dir", routes[i]->file, reason);
      }
    }
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0)
      fail("cannot create a pipe for a worker: {}", std::strerror(errno));
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      fail("cannot create a pipe for a worker: {}", std::strerror(errno));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
      fail("cannot start worker rank {}: fork failed: {}", spec.global_rank, std::strerror(errno));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the agent died before prctl
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      const char* reason = std::strerror(errno);
      const char* parts[] = {"cannot run worker command '", argv[0], "': ", reason, "\n"};
      for (const char* p : parts) {
        [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, p, std::strlen(p));
      }
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also done by the child; whichever runs first wins the race
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    auto worker = std::make_unique<Worker>();
    worker->global_rank = spec.global_rank;
    worker->pid = pid;
    worker->prefix = "[rank " + std::to_string(spec.global_rank) + "] ";
    worker->error_file = spec.error_file;
    worker->streams[0] = OutputStream{out_pipe[0], STDOUT_FILENO, spec.out.console, -1, {}, {}};
    worker->streams[1] = OutputStream{err_pipe[0], STDERR_FILENO, spec.err.console, -1, {}, {}};
    worker->streams[0].file_fd = log_fds[0];
    worker->streams[1].file_fd = log_fds[1];
    workers_.push_back(std::move(worker));
  }
}

WorkerGroup::~WorkerGroup() {
  if (!all_exited()) stop(std::chrono::milliseconds(0), SIGKILL);
  for (auto& w : workers_) {
    for (OutputStream& s : w->streams) {
      if (s.fd >= 0) ::close(s.fd);
      if (s.file_fd >= 0) ::close(s.file_fd);
    }
  }
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> out;
  for (const auto& w : workers_) out.push_back(w->pid);
  return out;
}

bool WorkerGroup::all_exited() const {
  for (const auto& w : workers_) {
    if (!w->exited) return false;
  }
  return true;
}

void WorkerGroup::reap(bool block) {
  for (auto& w : workers_) {
    if (w->exited) continue;
    // Notice the exit without reaping first: while the worker is a zombie its pid cannot be
    // reused, so SIGKILL to its process group reaches only what the worker itself left behind.
    siginfo_t info{};
    int r;
    do {
      r = ::waitid(P_PID, static_cast<id_t>(w->pid), &info,
                   WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
    } while (r < 0 && errno == EINTR);
    if (r < 0 || info.si_pid != w->pid) continue;
    ::kill(-w->pid, SIGKILL);
    int status = 0;
    while (::waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
    }
    w->exited = true;
    w->wait_status = status;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) consider_failure(*w, status);
  }
}

void WorkerGroup::consider_failure(const Worker& w, int status) {
  if (failure_reported_) return;
  const std::string message = error_file_message(w.error_file);
  std::optional<std::filesystem::file_time_type> written;
  if (!message.empty()) {
    std::error_code ec;
    const auto time = std::filesystem::last_write_time(w.error_file, ec);
    if (!ec) written = time;
  }
  // The first failure seen stands, unless both wrote error files and this one's is older (its
  // exception came first: the other is most likely a peer failing on the connection it lost).
  if (failed_worker_ != nullptr &&
      !(written && failure_written_ && *written < *failure_written_)) {
    return;
  }
  failure_ = describe_exit(w.global_rank, status);
  if (!message.empty()) failure_ += ": " + message;
  failure_exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  failed_worker_ = &w;
  failure_written_ = written;
}

void WorkerGroup::reap_adopted_orphans(std::chrono::milliseconds patience) {
  // The agent is a child subreaper (run_agent), so what a worker left behind is re-parented
  // here once the worker dies; reap it so no zombie outlives the agent.
  const auto deadline = Clock::now() + patience;
  while (true) {
    const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid > 0) continue;
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0 || Clock::now() >= deadline) return;  // ECHILD: no children left
    ::usleep(10'000);
  }
}

void WorkerGroup::pump(int timeout_ms, int wake_fd) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, OutputStream*>> owners;
  for (auto& w : workers_) {
    for (OutputStream& s : w->streams) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, POLLIN, 0});
      owners.emplace_back(w.get(), &s);
    }
  }
  if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
  const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready > 0) {
    char buffer[65536];
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [worker, stream] = owners[i];
      const ssize_t n = ::read(stream->fd, buffer, sizeof(buffer));
      if (n > 0) {
        stream->partial.append(buffer, static_cast<size_t>(n));
        worker->emit(*stream, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        worker->emit(*stream, true);
        ::close(stream->fd);
        stream->fd = -1;
      }
    }
  }
  reap(false);
}

WorkerGroup::Outcome WorkerGroup::wait(const std::function<bool()>& should_stop,
                                       std::chrono::milliseconds check_interval, int wake_fd) {
  auto next_check = Clock::now();
  std::optional<Clock::time_point> settled;  // after a failure: when to report it
  while (true) {
    if (!failure_.empty() && !settled) settled = Clock::now() + kFailureSettle;
    if (settled) {
      // A failure goes before should_stop; the other workers' exits may still come in, and one
      // of them may be the root cause.
      if (Clock::now() >= *settled || all_exited()) {
        failure_reported_ = true;
        return Outcome::kFailed;
      }
      pump(10, -1);
      continue;
    }
    if (all_exited()) {
      drain_output();
      return Outcome::kSucceeded;
    }
    const auto now = Clock::now();
    if (now >= next_check) {
      if (should_stop()) return Outcome::kInterrupted;
      next_check = now + check_interval;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_check - Clock::now());
    // Reap at least every 50 ms: worker exits are noticed by polling, not by SIGCHLD.
    pump(static_cast<int>(std::clamp<int64_t>(left.count(), 0, 50)), wake_fd);
    if (wake_fd >= 0) {
      pollfd pfd{wake_fd, POLLIN, 0};
      if (::poll(&pfd, 1, 0) > 0) next_check = Clock::now();
    }
  }
}

void WorkerGroup::stop(std::chrono::milliseconds grace, int first_signal,
                       const std::function<std::chrono::milliseconds()>& grace_now) {
  for (auto& w : workers_) {
    if (!w->exited) ::kill(-w->pid, first_signal);
  }
  const auto start = Clock::now();
  auto deadline = start + grace;
  auto next_ask = start;
  while (!all_exited()) {
    const auto now = Clock::now();
    if (grace_now && now >= next_ask) {
      deadline = std::max(deadline, start + grace_now());
      next_ask = now + std::chrono::milliseconds(250);
    }
    if (now >= deadline) break;
    pump(20, -1);
  }
  for (auto& w : workers_) {
    if (!w->exited) ::kill(-w->pid, SIGKILL);
  }
  reap(true);
  reap_adopted_orphans(std::chrono::milliseconds(500));
  drain_output();
}

void WorkerGroup::drain_output() {
  // Bounded: a leftover grandchild may hold a pipe open.
  const auto deadline = Clock::now() + std::chrono::milliseconds(500);
  while (Clock::now() < deadline) {
    bool open = false;
    for (auto& w : workers_) {
      for (OutputStream& s : w->streams) open = open || s.fd >= 0;
    }
    if (!open) return;
    pump(20, -1);
  }
}

}  // namespace shardtrain::launch
