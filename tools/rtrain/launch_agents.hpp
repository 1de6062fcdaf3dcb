// File: rtrain/launch_agents.hpp — rtrain launch's agents: the lead and the followers.
//
// One agent per node runs the generations of its workers (launch_group.hpp). Node 0's
// agent leads: it hosts the rendezvous of the other nodes' agents (launch_agents.cpp
// names its keys), decides each generation's layout and port, and when the run restarts
// or ends; the others follow it. On one node the lead is alone and no rendezvous runs.
//
//   Run run{o, run_id, hb_dir, hb_fd, secret, Events(o.events_path), {}};
//   return o.node_rank == 0 ? lead(run) : follow(run);  // the run's exit code
#pragma once

#include <functional>
#include <string>

#include "launch.hpp"
#include "launch_group.hpp"
#include "rkit/process.hpp"
#include "run_secret.hpp"

namespace rkit::rtrain {

// What every agent keeps for the run.
struct Run {
  const LaunchOptions& o;
  std::string run_id, hb_dir;
  int hb_fd;         // hb_dir, open: heartbeat files are opened and checked relative to it
  RunSecret secret;  // the workers' RKIT_RUN_SECRET; on several nodes, the agents' too
  Events events;
  SignalForwarder forward;     // SIGINT/SIGTERM/SIGHUP to us reach every worker's group
  std::function<void()> tick;  // called while the workers run (the run record's metrics)
};

// The agent of node 0 (or of the only node). Returns the run's exit code (launch()'s);
// Error(Unavailable) when the other nodes do not join within --join-timeout.
int lead(Run& run);

// The agent of another node: joins node 0's rendezvous and runs the generations it is
// told; returns the exit code node 0 decided (128 + signal for a signal before it joined).
// Error(Unavailable) when node 0's agent cannot be reached or goes, or its layout does
// not fit; Error(NoPerm) when the secrets differ.
int follow(Run& run);

}  // namespace rkit::rtrain
