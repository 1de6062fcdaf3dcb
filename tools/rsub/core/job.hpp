// File: rsub/core/job.hpp
//
// What the store, the scheduler and the daemon share about a job: its state (Slurm's
// names) and the cores and GPUs each of its tasks holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rsub {

// PENDING (held jobs are PENDING with reason JobHeldUser), RUNNING, and the terminal
// states. LOST: the task's supervisor vanished without recording an end (the machine or
// the daemon died mid-flight); the command may have run, so it is never run again
// automatically, and it counts as a failure for dependencies.
// OUT_OF_MEMORY: the kernel killed it for going over its memory limit (its cgroup's).
enum class JobState { Pending, Running, Completed, Failed, Cancelled, Timeout, Lost, OutOfMemory };

std::string_view state_name(JobState state);                 // "PENDING", "RUNNING", ...
std::optional<JobState> parse_state(std::string_view name);  // case-insensitive
inline bool terminal(JobState s) { return s != JobState::Pending && s != JobState::Running; }

// What rsub cancel, hold and release ask of a job, whichever backend runs it.
enum class Control { Cancel, Hold, Release };
inline const char* control_verb(Control c) {  // "cancel", "hold", "release"
  static const char* verbs[] = {"cancel", "hold", "release"};
  return verbs[static_cast<int>(c)];
}

// One task's share of the machine.
struct TaskAlloc {
  std::vector<int> cores;  // logical core indices
  std::vector<int> pus;    // OS PU indices (the task's CPU affinity)
  std::vector<int> gpus;   // GPU indices (CUDA_VISIBLE_DEVICES)
  std::uint64_t memory_bytes = 0;
  bool operator==(const TaskAlloc&) const = default;
};

Json alloc_to_json(const std::vector<TaskAlloc>& tasks);
std::vector<TaskAlloc> alloc_from_json(const Json& json);  // Error(DataErr) when malformed

}  // namespace rkit::rsub
