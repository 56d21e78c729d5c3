#include "launch/rendezvous.h"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "dist/store_value.h"

namespace shardtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// How often a waiting agent reads the state again.
constexpr std::chrono::milliseconds kPoll{100};

std::string gen_prefix(int64_t g) { return store_keys::generation(g); }

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

Json to_json(const RendezvousMember& m) {
  return Json{{"id", m.id},
              {"host", m.host},
              {"nproc", m.nproc},
              {"node_rank", m.node_rank},
              {"previous_rank", m.previous_rank}};
}

RendezvousMember member_from(const Json& j) {
  RendezvousMember m;
  m.id = j.at("id").get<std::string>();
  m.host = j.at("host").get<std::string>();
  m.nproc = j.at("nproc").get<int>();
  if (m.nproc < 1 || m.nproc > LaunchConfig::kMaxNprocPerNode)
    throw Json::other_error::create(501, "nproc out of range", &j);
  m.node_rank = j.at("node_rank").get<int>();
  m.previous_rank = j.at("previous_rank").get<int>();
  return m;
}

}  // namespace

int Generation::first_rank() const {
  int rank = 0;
  for (int i = 0; i < group_rank; ++i) rank += members[i].nproc;
  return rank;
}

int Generation::world_size() const {
  int world = 0;
  for (const RendezvousMember& m : members) world += m.nproc;
  return world;
}

struct Rendezvous::State {
  bool closed = false;
  int64_t attempt = 0;
  int restarts = 0;
  std::vector<RendezvousMember> members;
  std::vector<RendezvousMember> waiting;  // arrived after the close, in arrival order
  std::string text;  // the value as read from the store (compare_set's expected value)

  static int find(const std::vector<RendezvousMember>& list, const std::string& id) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].id == id) return static_cast<int>(i);
    }
    return -1;
  }
  int index_of(const std::string& id) const { return find(members, id); }

  std::string dump() const {
    const auto to_list = [](const std::vector<RendezvousMember>& from) {
      Json list = Json::array();
      for (const RendezvousMember& m : from) list.push_back(to_json(m));
      return list;
    };
    return Json{{"status", closed ? "closed" : "joining"},
                {"attempt", attempt},
                {"restarts", restarts},
                {"members", to_list(members)},
                {"waiting", to_list(waiting)}}
        .dump();
  }

  static std::optional<State> parse(const std::string& text) {
    const Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    try {
      State s;
      s.closed = j.at("status").get<std::string>() == "closed";
      s.attempt = j.at("attempt").get<int64_t>();
      s.restarts = j.at("restarts").get<int>();
      for (const Json& m : j.at("members")) s.members.push_back(member_from(m));
      for (const Json& m : j.at("waiting")) s.waiting.push_back(member_from(m));
      s.text = text;
      return s;
    } catch (const Json::exception&) {
      return std::nullopt;
    }
  }
};

Rendezvous::Rendezvous(Store& run_store, AgentLiveness& liveness, const LaunchConfig& config,
                       std::string run_id, RendezvousMember self, std::function<bool()> interrupted)
    : store_(run_store),
      liveness_(liveness),
      config_(config),
      run_id_(std::move(run_id)),
      self_(std::move(self)),
      interrupted_(std::move(interrupted)) {}

std::string Rendezvous::where() const {
  return fmt::format("rendezvous '{}' at {}", run_id_, store_.endpoint());
}

int64_t Rendezvous::current_generation() {
  while (true) {
    if (const auto value = store_.try_get("generation")) {
      return parse_store_integer(store_, "generation", *value, 0);
    }
    store_.compare_set("generation", "", "0");
  }
}

std::optional<Rendezvous::State> Rendezvous::read_state(int64_t g) {
  const std::string key = gen_prefix(g) + "state";
  const std::optional<std::string> text = store_.try_get(key);
  if (!text) return std::nullopt;
  std::optional<State> state = State::parse(*text);
  if (!state) {
    fail(
        "{}: key '{}' does not hold a shardtrain rendezvous state; HINT: another program uses "
        "this run id: pick another --rdzv-id",
        where(), key);
  }
  return state;
}

void Rendezvous::open_state(int64_t g) {
  State initial;
  if (g > 0) {
    // A generation after a running one continues its run; after an ended one, a new run starts.
    const std::optional<State> previous = read_state(g - 1);
    if (previous && !store_.try_get(gen_prefix(g - 1) + "ended")) {
      const std::optional<std::string> failed = store_.try_get(gen_prefix(g - 1) + "failed");
      initial.attempt = previous->attempt + 1;
      initial.restarts = previous->restarts + (failed && failed->rfind("restart|", 0) == 0 ? 1 : 0);
    }
    // Agents that waited for this generation are in it from the start, as far as places
    // remain beside the previous group's members (who come back first).
    if (previous) {
      const size_t places =
          static_cast<size_t>(config_.max_nodes) -
          std::min(previous->members.size(), static_cast<size_t>(config_.max_nodes));
      for (const RendezvousMember& m : previous->waiting) {
        if (initial.members.size() == places) break;
        if (!liveness_.departed(m.id)) initial.members.push_back(m);
      }
    }
  }
  // Of racing openers, the first write stands.
  store_.compare_set(gen_prefix(g) + "state", "", initial.dump());
}

bool Rendezvous::replace_state(int64_t g, const State& before, const State& after) {
  const std::string desired = after.dump();
  return store_.compare_set(gen_prefix(g) + "state", before.text, desired) == desired;
}

void Rendezvous::add_self(int64_t g, const State& state) {
  State after = state;
  if (self_.node_rank >= 0) {
    for (const RendezvousMember& m : state.members) {
      if (m.node_rank != self_.node_rank) continue;
      if (const std::optional<std::string> why = liveness_.departed(m.id)) {
        log::warn("launch: {}: dropping {} (node rank {}) from forming generation {}: {}", where(),
                  m.id, m.node_rank, g, *why);
        std::erase_if(after.members, [&](const RendezvousMember& x) { return x.id == m.id; });
        continue;
      }
      fail(
          "{}: node rank {} has already joined (from {}); give each node its own --node-rank "
          "0..{}",
          where(), self_.node_rank, m.id, config_.max_nodes - 1);
    }
  }
  after.members.push_back(self_);
  replace_state(g, state, after);  // on a lost race the caller reads the state again
}

void Rendezvous::close(int64_t g, const State& state) {
  // Order: ran before (by rank there), then requested node rank, then join order.
  std::vector<size_t> order(state.members.size());
  std::iota(order.begin(), order.end(), 0);
  const auto key = [&](size_t i) {
    const RendezvousMember& m = state.members[i];
    return std::make_tuple(m.previous_rank < 0 ? INT_MAX : m.previous_rank,
                           m.node_rank < 0 ? INT_MAX : m.node_rank, i);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  State after = state;
  after.closed = true;
  after.members.clear();
  for (size_t i : order) after.members.push_back(state.members[i]);
  replace_state(g, state, after);
}

void Rendezvous::drop_departed(int64_t g, const State& state) {
  State after = state;
  for (const RendezvousMember& m : state.members) {
    if (m.id == self_.id) continue;
    if (const std::optional<std::string> why = liveness_.departed(m.id)) {
      log::warn("launch: {}: dropping {} from forming generation {}: {}", where(), m.id, g, *why);
      std::erase_if(after.members, [&](const RendezvousMember& x) { return x.id == m.id; });
    }
  }
  if (after.members.size() != state.members.size()) replace_state(g, state, after);
}

void Rendezvous::withdraw(int64_t g) {
  const auto remove_self = [&](std::vector<RendezvousMember>& list) {
    return std::erase_if(list, [&](const RendezvousMember& m) { return m.id == self_.id; }) > 0;
  };
  try {
    for (int tries = 0; tries < 10; ++tries) {
      const std::optional<State> state = read_state(g);
      if (!state) return;
      State after = *state;
      // A closed generation's members stay: the group runs with them.
      const bool listed = state->closed ? remove_self(after.waiting) : remove_self(after.members);
      if (!listed || replace_state(g, *state, after)) return;
    }
  } catch (const Error&) {
    // Best effort: peers drop this agent anyway once its liveness lapses.
  }
}

void Rendezvous::advance_from(int64_t g) {
  store_.compare_set("generation", std::to_string(g), std::to_string(g + 1));
}

void Rendezvous::advance(const Generation& g) { advance_from(g.number); }

int Rendezvous::waiting_count(const Generation& g) {
  const std::optional<State> state = read_state(g.number);
  return state ? static_cast<int>(state->waiting.size()) : 0;
}

void Rendezvous::end(const Generation& g, const std::string& how) {
  store_.set(g.prefix() + "ended", how);
}

std::optional<std::string> Rendezvous::departed_member(const Generation& g) {
  for (size_t i = 0; i < g.members.size(); ++i) {
    if (static_cast<int>(i) == g.group_rank) continue;
    if (const std::optional<std::string> why = liveness_.departed(g.members[i].id)) {
      return fmt::format("node {} ({}) left the group: {}", i, g.members[i].host, *why);
    }
  }
  return std::nullopt;
}

void Rendezvous::fail_join_timeout(const State& state) {
  const int joined = static_cast<int>(state.members.size());
  std::string missing;
  const bool all_ranked = std::all_of(state.members.begin(), state.members.end(),
                                      [](const RendezvousMember& m) { return m.node_rank >= 0; });
  const bool elastic = config_.min_nodes != config_.max_nodes;
  if (all_ranked && !elastic) {
    for (int r = 0; r < config_.max_nodes; ++r) {
      const bool present = std::any_of(state.members.begin(), state.members.end(),
                                       [&](const RendezvousMember& m) { return m.node_rank == r; });
      if (!present) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  const std::string nnodes = elastic ? fmt::format("{}:{}", config_.min_nodes, config_.max_nodes)
                                     : std::to_string(config_.max_nodes);
  fail(
      "{}: only {} of {} nodes joined within {:.3g} s{}{}; HINT: start `shardtrain launch "
      "--nnodes {} --rdzv-endpoint {}` on every node, or raise --rdzv-conf join_timeout",
      where(), joined, config_.min_nodes, seconds(config_.join_timeout),
      missing.empty() ? "" : " (missing node rank " + missing + ")",
      elastic ? fmt::format(" (--nnodes {} needs at least {})", nnodes, config_.min_nodes) : "",
      nnodes, store_.endpoint());
}

void Rendezvous::fail_no_place(int64_t g, const State& state) {
  fail(
      "{}: generation {} runs with {} of at most {} nodes and no place opened for this node "
      "within {:.3g} s; HINT: a node joins when the group next re-forms (after a failure, or "
      "at once while fewer than {} run); raise --rdzv-conf join_timeout to wait longer",
      where(), g, state.members.size(), config_.max_nodes, seconds(config_.join_timeout),
      config_.max_nodes);
}

// Where one join() stands between polls of the state.
struct Rendezvous::JoinProgress {
  Clock::time_point deadline;
  Clock::time_point now;
  bool check_liveness = false;  // this poll also judges the members' liveness
  int64_t last_call_gen = -1;   // the generation whose last call this agent is timing
  Clock::time_point last_call_deadline{};
};

Generation Rendezvous::join(int previous_rank) {
  self_.previous_rank = previous_rank;
  JoinProgress progress;
  progress.deadline = Clock::now() + config_.join_timeout;
  auto next_liveness_check = Clock::now() + liveness_.check_interval();
  int64_t entered = -1;  // the generation this agent is listed in (forming or waiting)
  while (true) {
    if (interrupted_()) {
      if (entered >= 0) withdraw(entered);
      fail("{}: interrupted by a signal during rendezvous", where());
    }
    const int64_t g = current_generation();
    entered = g;
    const std::optional<State> state = read_state(g);
    if (!state) {
      open_state(g);
      continue;
    }
    progress.now = Clock::now();
    progress.check_liveness = progress.now >= next_liveness_check;
    if (progress.check_liveness) next_liveness_check = progress.now + liveness_.check_interval();
    const int index = state->index_of(self_.id);
    if (state->closed && index >= 0) {
      Generation out;
      out.number = g;
      out.attempt = state->attempt;
      out.restarts = state->restarts;
      out.members = state->members;
      out.group_rank = index;
      return out;
    }
    const JoinStep next = state->closed ? wait_for_next(g, *state, progress)
                          : index < 0   ? enter_forming(g, *state, progress)
                                        : close_when_complete(g, *state, progress);
    if (next == JoinStep::kPoll) std::this_thread::sleep_for(kPoll);
  }
}

Rendezvous::JoinStep Rendezvous::wait_for_next(int64_t g, const State& state,
                                               const JoinProgress& progress) {
  if (store_.try_get(gen_prefix(g) + "ended")) {
    advance_from(g);  // that run is over: this launch starts the next generation
    return JoinStep::kReadAgain;
  }
  if (State::find(state.waiting, self_.id) < 0) {
    State after = state;
    after.waiting.push_back(self_);
    if (!replace_state(g, state, after)) return JoinStep::kReadAgain;
    log::info(
        "launch: {}: generation {} is running with {} of at most {} nodes; waiting to join the "
        "next",
        where(), g, state.members.size(), config_.max_nodes);
  }
  if (progress.check_liveness &&
      std::all_of(state.members.begin(), state.members.end(), [&](const RendezvousMember& m) {
        return liveness_.departed(m.id).has_value();
      })) {
    log::warn("launch: {}: every node of generation {} is gone; starting the next", where(), g);
    store_.compare_set(gen_prefix(g) + "failed", "",
                       fmt::format("restart|every node of generation {} left", g));
    advance_from(g);
    return JoinStep::kReadAgain;
  }
  if (progress.now >= progress.deadline) {
    withdraw(g);
    fail_no_place(g, state);
  }
  return JoinStep::kPoll;
}

Rendezvous::JoinStep Rendezvous::enter_forming(int64_t g, const State& state,
                                               const JoinProgress& progress) {
  if (static_cast<int>(state.members.size()) < config_.max_nodes) {
    add_self(g, state);
    return JoinStep::kReadAgain;
  }
  // Full: it closes at once, and this agent then waits for the next generation.
  if (progress.now >= progress.deadline) fail_no_place(g, state);
  return JoinStep::kPoll;
}

Rendezvous::JoinStep Rendezvous::close_when_complete(int64_t g, const State& state,
                                                     JoinProgress& progress) {
  const int joined = static_cast<int>(state.members.size());
  bool complete = joined >= config_.max_nodes;
  if (!complete && joined >= config_.min_nodes) {
    if (progress.last_call_gen != g) {
      progress.last_call_gen = g;
      progress.last_call_deadline = progress.now + config_.last_call_timeout;
      log::info(
          "launch: {}: {} of {}..{} nodes joined generation {}; closing in {:.3g} s unless all "
          "{} join sooner (last_call_timeout)",
          where(), joined, config_.min_nodes, config_.max_nodes, g,
          seconds(config_.last_call_timeout), config_.max_nodes);
    }
    complete = progress.now >= progress.last_call_deadline;
  } else if (joined < config_.min_nodes) {
    progress.last_call_gen = -1;
  }
  if (complete) {
    close(g, state);
    return JoinStep::kReadAgain;
  }
  if (progress.check_liveness) drop_departed(g, state);
  if (progress.now >= progress.deadline) {
    withdraw(g);
    fail_join_timeout(state);
  }
  return JoinStep::kPoll;
}

}  // namespace shardtrain::launch
