// File: rsub/core/job.cpp
#include "core/job.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "rkit/error.hpp"

namespace rkit::rsub {

namespace {
constexpr std::array<std::pair<JobState, std::string_view>, 8> kStates{{
    {JobState::Pending, "PENDING"},
    {JobState::Running, "RUNNING"},
    {JobState::Completed, "COMPLETED"},
    {JobState::Failed, "FAILED"},
    {JobState::Cancelled, "CANCELLED"},
    {JobState::Timeout, "TIMEOUT"},
    {JobState::Lost, "LOST"},
    {JobState::OutOfMemory, "OUT_OF_MEMORY"},
}};
}  // namespace

std::string_view state_name(JobState state) {
  for (const auto& [s, name] : kStates)
    if (s == state) return name;
  return "LOST";
}

std::optional<JobState> parse_state(std::string_view name) {
  for (const auto& [s, known] : kStates)
    if (std::equal(name.begin(), name.end(), known.begin(), known.end(),
                   [](char a, char b) { return std::toupper(static_cast<unsigned char>(a)) == b; }))
      return s;
  return std::nullopt;
}

Json alloc_to_json(const std::vector<TaskAlloc>& tasks) {
  Json out = Json::array();
  for (std::size_t i = 0; i < tasks.size(); ++i)
    out.push_back({{"task", i},
                   {"cores", tasks[i].cores},
                   {"pus", tasks[i].pus},
                   {"gpus", tasks[i].gpus},
                   {"memory_bytes", tasks[i].memory_bytes}});
  return out;
}

std::vector<TaskAlloc> alloc_from_json(const Json& json) {
  std::vector<TaskAlloc> out;
  try {
    for (const Json& t : json)
      out.push_back({t.at("cores").get<std::vector<int>>(), t.at("pus").get<std::vector<int>>(),
                     t.at("gpus").get<std::vector<int>>(), t.at("memory_bytes").get<std::uint64_t>()});
  } catch (const Json::exception& e) {
    throw Error(Exit::DataErr, std::string("allocation: ") + e.what());
  }
  return out;
}

}  // namespace rkit::rsub
