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

// One output pipe of a worker and its unfinished last line.
struct OutputStream {
  int fd = -1;         // read end; -1 once at EOF
  int target_fd = 1;   // the agent's stdout or stderr
  std::string partial;
};

struct WorkerGroup::Worker {
  int global_rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int wait_status = 0;
  std::string prefix;
  OutputStream streams[2];

  // Writes each complete line of `partial` (all of it when `flush`) with the prefix.
  void emit(OutputStream& s, bool flush) {
    std::string out;
    size_t start = 0;
    while (true) {
      const size_t newline = s.partial.find('\n', start);
      if (newline == std::string::npos) break;
      out += prefix;
      out.append(s.partial, start, newline + 1 - start);
      start = newline + 1;
    }
    s.partial.erase(0, start);
    if (!s.partial.empty() && (flush || s.partial.size() > kMaxLineBytes)) {
      out += prefix + s.partial + "\n";
      s.partial.clear();
    }
    if (!out.empty()) write_fully(s.target_fd, out);
  }
};

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

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) fail("cannot create a pipe for a worker: {}", std::strerror(errno));
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
    worker->streams[0] = OutputStream{out_pipe[0], STDOUT_FILENO, {}};
    worker->streams[1] = OutputStream{err_pipe[0], STDERR_FILENO, {}};
    workers_.push_back(std::move(worker));
  }
}

WorkerGroup::~WorkerGroup() {
  if (!all_exited()) stop(std::chrono::milliseconds(0), SIGKILL);
  for (auto& w : workers_) {
    for (OutputStream& s : w->streams) {
      if (s.fd >= 0) ::close(s.fd);
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
      r = ::waitid(P_PID, static_cast<id_t>(w->pid), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
    } while (r < 0 && errno == EINTR);
    if (r < 0 || info.si_pid != w->pid) continue;
    ::kill(-w->pid, SIGKILL);
    int status = 0;
    while (::waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
    }
    w->exited = true;
    w->wait_status = status;
    if (failure_.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failure_ = describe_exit(w->global_rank, status);
    }
  }
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
  while (true) {
    if (!failure_.empty()) return Outcome::kFailed;
    if (all_exited()) {
      // Drain what the workers wrote before exiting (bounded: a leftover grandchild may hold
      // a pipe open).
      const auto drain_deadline = Clock::now() + std::chrono::milliseconds(500);
      while (Clock::now() < drain_deadline) {
        bool open = false;
        for (auto& w : workers_) {
          for (OutputStream& s : w->streams) open = open || s.fd >= 0;
        }
        if (!open) break;
        pump(50, -1);
      }
      return Outcome::kSucceeded;
    }
    const auto now = Clock::now();
    if (now >= next_check) {
      if (should_stop()) return Outcome::kInterrupted;
      next_check = now + check_interval;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_check - Clock::now());
    // Reap at least every 50 ms: worker exits are noticed by polling, not by SIGCHLD.
    pump(static_cast<int>(std::clamp<int64_t>(left.count(), 0, 50)), wake_fd);
    if (wake_fd >= 0) {
      pollfd pfd{wake_fd, POLLIN, 0};
      if (::poll(&pfd, 1, 0) > 0) next_check = Clock::now();
    }
  }
}

void WorkerGroup::stop(std::chrono::milliseconds grace, int first_signal) {
  for (auto& w : workers_) {
    if (!w->exited) ::kill(-w->pid, first_signal);
  }
  const auto deadline = Clock::now() + grace;
  while (!all_exited() && Clock::now() < deadline) pump(20, -1);
  for (auto& w : workers_) {
    if (!w->exited) ::kill(-w->pid, SIGKILL);
  }
  reap(true);
  reap_adopted_orphans(std::chrono::milliseconds(500));
  const auto drain_deadline = Clock::now() + std::chrono::milliseconds(500);
  while (Clock::now() < drain_deadline) {
    bool open = false;
    for (auto& w : workers_) {
      for (OutputStream& s : w->streams) open = open || s.fd >= 0;
    }
    if (!open) break;
    pump(20, -1);
  }
}

}  // namespace shardtrain::launch
