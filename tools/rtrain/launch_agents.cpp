// File: rtrain/launch_agents.cpp — the lead and follow agents of rtrain launch and their
// rendezvous (launch_agents.hpp).
#include "launch_agents.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/jsonl.hpp"
#include "tcp_store.hpp"

namespace rkit::rtrain {

namespace {

// A port nobody listens on now at `addr`, as torchrun picks one for --master-port 0.
int free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res); rc != 0)
    throw Error(Exit::Unavailable, fmt::format("pick a free port on {}: {}", addr, ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  int err = EADDRNOTAVAIL;
  for (addrinfo* a = res; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (!fd || ::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      err = errno;
      continue;
    }
    return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  throw system_error("pick a free port on " + addr, err);
}

// A message's number field; -1 when it is not one (or is out of int's range).
int number(const std::string& text) {
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty() ? v : -1;
}

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<char>& v) { return {v.begin(), v.end()}; }

bool restartable(const LaunchOptions& o, int generation, int code) {
  return generation < o.max_restarts &&
         (o.restart_on.empty() || std::find(o.restart_on.begin(), o.restart_on.end(), code) != o.restart_on.end());
}

// The agents' rendezvous, on several nodes: node 0's agent hosts an authenticated store
// (tcp_store.hpp, the key "agents" of the run's secret) on --master-addr:--master-port, the
// others are its clients. Keys:
//   node/R                 node R's worker count, created by its agent: a second agent with
//                          rank R is refused. Watched: node/R#closed appears once that agent's
//                          connection closes (it exited or died).
//   gen/G                  node 0: generation G's layout, {"master_port", "world_size",
//                          "run_id", "offsets"} (JSON; offsets by node rank)
//   stop/G                 node 0: stop generation G's workers
//   fail/G/R, abort/G/R    node R: "CODE WHY": a worker failed; the agent got a signal
//   done/G/R, stopped/G/R  node R: its workers ended well; they ended after stop/G
//   exit                   node 0: the run's exit code, which every agent exits with
// An agent waits for keys with await_any (node 0's store holds the request until one
// exists, at most 40 to 200 ms, then the agent looks at its workers and signals again);
// node 0 erases a generation's keys when the next one starts.
constexpr auto kAgentTimeout = std::chrono::seconds(60);  // one request to node 0's store
constexpr double kExitWait_s = 10;                        // node 0 waits so long for the others to read "exit"

// Node R's join value: its worker count, 1 to kMaxNproc.
int join_count(int node, const std::vector<char>& value) {
  const int n = number(text_of(value));
  if (n < 1 || n > kMaxNproc)
    throw Error(Exit::DataErr,
                fmt::format("rendezvous: node {} joined with '{}' workers: not 1 to {}", node,
                            text_of(value).substr(0, 20), kMaxNproc),
                "the agents' rtrain versions differ?");
  return n;
}

// Tells the other agents the run's exit code, then waits (a while) until each one still
// there has read it and gone: node 0's store must outlive their last look.
void end_run(TcpStore& store, int code, const std::vector<int>& followers, const std::set<int>& gone) {
  store.set("exit", bytes_of(std::to_string(code)));
  std::vector<std::string> keys;
  for (int r : followers)
    if (!gone.count(r)) keys.push_back(fmt::format("node/{}#closed", r));
  const double deadline = now_s() + kExitWait_s;
  while (!keys.empty() && now_s() < deadline) {
    const auto got = store.await_any(keys, std::chrono::milliseconds(200));
    std::vector<std::string> left;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (!got[i]) left.push_back(keys[i]);
    keys = std::move(left);
  }
}

}  // namespace

// The agent of node 0 (or of the only node): hosts the rendezvous, where the other nodes'
// agents join; decides each generation's layout and port, and when the run restarts or ends.
int lead(Run& run) {
  const LaunchOptions& o = run.o;
  std::unique_ptr<TcpStore> store;
  std::map<int, int> nproc_of{{0, o.nproc}};
  std::vector<int> followers;
  for (int r = 1; r < o.nnodes; ++r) followers.push_back(r);
  std::set<int> gone;  // nodes whose agent died
  if (o.nnodes > 1) {
    store = std::make_unique<TcpStore>(o.master_addr, o.master_port, true, std::chrono::milliseconds(kAgentTimeout),
                                       run.secret.key("agents"));
    std::vector<int> missing = followers;
    const double join_deadline = now_s() + o.join_timeout_s;
    while (!missing.empty()) {
      std::vector<std::string> keys;
      for (int r : missing) keys.push_back(fmt::format("node/{}", r));
      const auto got = store->await_any(keys, std::chrono::milliseconds(200));
      std::vector<int> left;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i])
          nproc_of[missing[i]] = join_count(missing[i], *got[i]);
        else
          left.push_back(missing[i]);
      }
      missing = std::move(left);
      if (missing.empty()) break;
      if (const int sig = run.forward.last_signal()) {
        end_run(*store, 128 + sig, {}, gone);
        return 128 + sig;
      }
      if (now_s() > join_deadline)
        throw Error(Exit::Unavailable,
                    fmt::format("rendezvous: {} of {} nodes joined within {:.0f}s",
                                o.nnodes - static_cast<int>(missing.size()), o.nnodes, o.join_timeout_s));
    }
  }
  int crash_loop = 0;  // generations in a row that failed within --min-uptime of their start
  const auto finish_run = [&](int code) {
    if (store) end_run(*store, code, followers, gone);
    return code;
  };
  for (int generation = 0;; ++generation) {
    const std::string gen = std::to_string(generation);
    Layout l;
    l.nnodes = o.nnodes;
    long long world = 0;
    for (const auto& [_, n] : nproc_of) world += n;
    if (world > kMaxWorld) throw Error(Exit::Usage, fmt::format("{} workers in all: more than {}", world, kMaxWorld));
    l.world = static_cast<int>(world);
    // Workers meet at a port the agents' rendezvous does not hold: a fresh one per
    // generation across nodes (no TIME_WAIT), --master-port itself on one node.
    l.master_port = o.nnodes > 1 || o.master_port == 0 ? free_port(o.master_addr) : o.master_port;
    if (store) {
      if (generation > 0) {  // every agent is past generation - 1: its keys can go
        const std::string prev = std::to_string(generation - 1);
        std::vector<std::string> old{"gen/" + prev, "stop/" + prev};
        for (int r : followers)
          for (const char* k : {"fail", "abort", "done", "stopped"}) old.push_back(fmt::format("{}/{}/{}", k, prev, r));
        store->erase(old);
      }
      Json offsets = Json::array();
      int offset = 0;
      for (const auto& [_, n] : nproc_of) offsets.push_back(offset), offset += n;
      const Json layout{
          {"master_port", l.master_port}, {"world_size", l.world}, {"run_id", run.run_id}, {"offsets", offsets}};
      store->set("gen/" + gen, bytes_of(layout.dump()));
    }
    const double started = now_s();
    Group g(o, l, generation, run.run_id, run.hb_dir, run.hb_fd, run.secret.text(), run.forward, run.events);
    std::set<int> done, stopped;  // nodes whose workers ended well, or ended after a stop
    std::set<int> reported;       // nodes that reported a failure or a signal
    std::optional<std::string> remote_failure;
    int remote_code = 0;
    bool stopping = false, abort = false;
    for (;;) {
      g.step(store ? 10 : 50);  // with other nodes, the rest of the wait is on their news
      if (run.tick) run.tick();
      if (store) {
        std::vector<std::string> keys;
        std::vector<std::pair<int, char>> what;  // the node and kind of each key
        const auto ask = [&](int r, char kind, const std::string& key) {
          keys.push_back(key);
          what.emplace_back(r, kind);
        };
        for (int r : followers) {
          if (gone.count(r)) continue;
          if (!reported.count(r))
            ask(r, 'f', fmt::format("fail/{}/{}", gen, r)), ask(r, 'a', fmt::format("abort/{}/{}", gen, r));
          if (!done.count(r)) ask(r, 'd', fmt::format("done/{}/{}", gen, r));
          if (!stopped.count(r)) ask(r, 's', fmt::format("stopped/{}/{}", gen, r));
          ask(r, 'x', fmt::format("node/{}#closed", r));
        }
        const auto got =
            keys.empty() ? decltype(store->try_get(keys)){} : store->await_any(keys, std::chrono::milliseconds(40));
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!got[i]) continue;
          const auto [r, kind] = what[i];
          if (kind == 'f' || kind == 'a') {
            if (!reported.insert(r).second) continue;  // fail and abort both: the first one counts
            abort |= kind == 'a';                      // that agent was stopped by a signal: no restart
            if (!remote_failure) {
              const std::string msg = text_of(*got[i]);
              const auto space = msg.find(' ');
              remote_code = std::clamp(number(msg.substr(0, space)), 1, 255);
              remote_failure = space == std::string::npos ? std::string("a failure on node ") + std::to_string(r)
                                                          : msg.substr(space + 1);
            }
          } else if (kind == 'd') {
            done.insert(r);
          } else if (kind == 's') {
            stopped.insert(r);
          } else if (!gone.count(r)) {  // its agent died: it cannot rejoin, so no restart
            gone.insert(r);
            stopped.insert(r);
            abort = true;
            if (!remote_failure) remote_failure = fmt::format("the agent of node {} is gone", r), remote_code = 1;
          }
        }
      }
      const bool failed = g.failure() || remote_failure || run.forward.last_signal();
      if (failed && !stopping) {
        stopping = true;
        g.stop();
        if (store) store->set("stop/" + gen, {});
      }
      const std::size_t peers = followers.size();
      if (!g.running() && (stopping ? stopped.size() == peers : done.size() == peers)) break;
    }
    g.finish();
    if (!g.failure() && !remote_failure && !run.forward.last_signal()) {
      run.events.emit("done", {{"generation", generation}, {"exit_code", 0}});
      return finish_run(0);
    }
    if (const int sig = run.forward.last_signal()) {
      run.events.emit("done", {{"generation", generation}, {"signal", signal_name(sig)}});
      return finish_run(128 + sig);
    }
    const std::string why = g.failure() ? *g.failure() : *remote_failure;
    if (g.failure())
      report(g, generation);
    else
      std::cerr << fmt::format("rtrain: worker failed (generation {}): {}\n", generation, why);
    const int first_code = g.failure() ? g.failed_code() : remote_code;
    // A generation that fails within --min-uptime of its start crashed at start; so many in
    // a row are a crash loop, which restarting will not mend.
    crash_loop = o.min_uptime_s > 0 && now_s() - started < o.min_uptime_s ? crash_loop + 1 : 0;
    if (crash_loop >= kCrashLoopLimit)
      std::cerr << fmt::format(
          "rtrain: {} generations in a row failed within --min-uptime {:.0f}s: a crash loop; "
          "not restarting\n",
          crash_loop, o.min_uptime_s);
    if (abort || crash_loop >= kCrashLoopLimit || !restartable(o, generation, first_code)) {
      const int code = std::max({g.exit_code(), remote_code, 1});
      run.events.emit("done", {{"generation", generation}, {"exit_code", code}, {"root_cause", why}});
      return finish_run(code);
    }
    run.events.emit("restart", {{"generation", generation + 1}, {"root_cause", why}});
  }
}

namespace {

// Generation `generation`'s layout for this node, from node 0's gen/G; Error(Unavailable)
// for one that does not fit (another rtrain, or a bug): ranks are never guessed.
Layout parse_layout(const std::vector<char>& value, const LaunchOptions& o, std::string& run_id) {
  const Json j = Json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  const auto bad = [&] {
    return Error(Exit::Unavailable, "rendezvous: node 0's agent sent a layout that does not fit this node",
                 "the agents' rtrain versions differ, or their --nnodes?");
  };
  if (!j.is_object() || !j.contains("master_port") || !j.contains("world_size") || !j.contains("offsets") ||
      !j.contains("run_id") || !j["master_port"].is_number_integer() || !j["world_size"].is_number_integer() ||
      !j["offsets"].is_array() || !j["run_id"].is_string() || j["offsets"].size() != static_cast<std::size_t>(o.nnodes))
    throw bad();
  const auto& off = j["offsets"][static_cast<std::size_t>(o.node_rank)];
  if (!off.is_number_integer()) throw bad();
  const long long port = j["master_port"].get<long long>(), world = j["world_size"].get<long long>(),
                  offset = off.get<long long>();
  if (port < 1 || port > 65535 || world < 1 || world > kMaxWorld || offset < 0 || offset + o.nproc > world) throw bad();
  run_id = j["run_id"].get<std::string>();  // node 0's: one TORCHELASTIC_RUN_ID for the whole run
  return Layout{o.node_rank, o.nnodes, static_cast<int>(world), static_cast<int>(offset), static_cast<int>(port)};
}

// The exit code node 0 decided ("exit"), 0 to 255.
int exit_code_of(const std::vector<char>& value) { return std::clamp(number(text_of(value)), 0, 255); }

}  // namespace

// The agent of another node: joins node 0's rendezvous and runs the generations it is told.
int follow(Run& run) {
  const LaunchOptions& o = run.o;
  const auto deadline = now_s() + o.join_timeout_s;
  const Key key = run.secret.key("agents");
  std::unique_ptr<TcpStore> store;
  while (!store) {  // node 0's agent may not listen yet; a refused handshake ends it at once
    try {
      const double left_ms = std::clamp((deadline - now_s()) * 1000, 1.0, 1000.0);
      store = std::make_unique<TcpStore>(o.master_addr, o.master_port, false,
                                         std::chrono::milliseconds(static_cast<long long>(left_ms)), key);
    } catch (const Error& e) {
      if (e.code() != Exit::Unavailable) throw;
      if (const int sig = run.forward.last_signal()) return 128 + sig;
      if (now_s() > deadline)
        throw Error(Exit::Unavailable, fmt::format("rendezvous: no agent of node 0 at {}:{} within {:.0f}s",
                                                   o.master_addr, o.master_port, o.join_timeout_s));
    }
  }
  store->set_timeout(kAgentTimeout);
  if (!store->create(fmt::format("node/{}", o.node_rank), bytes_of(std::to_string(o.nproc)), /*watch=*/true))
    throw Error(Exit::Unavailable, fmt::format("rendezvous: node rank {} has joined already", o.node_rank),
                "every agent needs its own --node-rank");
  const auto gone = [] { return Error(Exit::Unavailable, "rendezvous: the agent of node 0 is gone"); };
  // Waits a little for one of the keys (a signal to this agent cuts no wait short: 100 ms).
  const auto look = [&](const std::vector<std::string>& keys) {
    try {
      return store->await_any(keys, std::chrono::milliseconds(100));
    } catch (const Error& e) {
      if (e.code() == Exit::Unavailable) throw gone();
      throw;
    }
  };
  const auto tell = [&](const std::string& key, const std::string& value) {
    try {
      store->set(key, bytes_of(value));
    } catch (const Error& e) {
      if (e.code() == Exit::Unavailable) throw gone();
      throw;
    }
  };
  const std::string me = std::to_string(o.node_rank);
  bool signalled = false;  // this agent's signal was reported: it runs no more workers
  const auto report_signal = [&](const std::string& gen) {
    const int sig = run.forward.last_signal();
    if (!sig || signalled) return false;
    signalled = true;  // the whole run ends, as it would had node 0's agent got the signal
    tell(fmt::format("abort/{}/{}", gen, me),
         fmt::format("{} the agent of node {} got {}", 128 + sig, o.node_rank, signal_name(sig)));
    return true;
  };
  for (int generation = 0;; ++generation) {
    const std::string gen = std::to_string(generation);
    // The generation's layout, or the end of the run.
    std::optional<std::vector<char>> layout;
    while (!layout) {
      auto got = look({"gen/" + gen, "exit"});
      if (got[1]) return exit_code_of(*got[1]);
      layout = std::move(got[0]);
      if (!layout) report_signal(gen);
    }
    bool reported = signalled, told_to_stop = false;
    if (!signalled) {
      const Layout l = parse_layout(*layout, o, run.run_id);
      Group g(o, l, generation, run.run_id, run.hb_dir, run.hb_fd, run.secret.text(), run.forward, run.events);
      bool lead_gone = false;
      while (g.running()) {
        g.step(50);
        if (lead_gone) continue;
        try {
          if (!told_to_stop && store->try_get({"stop/" + gen})[0]) told_to_stop = true, g.stop();
          // A signal first: its workers' deaths are not failures of theirs.
          if (!reported && report_signal(gen)) reported = true;
          if (g.failure() && !reported) {
            reported = true;
            tell(fmt::format("fail/{}/{}", gen, me), fmt::format("{} {}", g.failed_code(), *g.failure()));
          }
        } catch (const Error& e) {
          if (e.code() != Exit::Unavailable) throw;
          lead_gone = true, g.stop();  // node 0's agent died: end our workers, then say so
        }
      }
      g.finish();
      if (lead_gone) throw gone();
      if (g.failure()) report(g, generation);
      // Node 0 waits for "stopped" after it said stop, for "done" otherwise.
      if (!told_to_stop && !reported) tell(fmt::format("done/{}/{}", gen, me), "");
    }
    while (!told_to_stop) {
      if (report_signal(gen)) reported = true;  // between generations
      const auto got = look({"stop/" + gen, "exit"});
      if (got[1]) return exit_code_of(*got[1]);
      if (got[0]) told_to_stop = true;
    }
    tell(fmt::format("stopped/{}/{}", gen, me), "");
  }
}

}  // namespace rkit::rtrain
