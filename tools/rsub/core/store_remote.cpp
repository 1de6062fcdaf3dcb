// File: rsub/core/store_remote.cpp — the remote backends' jobs in the job store (store.hpp):
// their remote ids, submissions not yet confirmed, and the states a refresh read.
#include "core/store.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "core/store_sql.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"

namespace rkit::rsub {

void Store::set_remote_ids(const std::vector<std::int64_t>& ids, const std::vector<std::string>& remote_ids) {
  if (ids.size() != remote_ids.size())
    throw Error(Exit::Software, fmt::format("job store: {} remote ids for {} jobs", remote_ids.size(), ids.size()));
  transaction([&] {
    Stmt& s = stmt("UPDATE jobs SET remote_id = ? WHERE id = ?");
    for (std::size_t i = 0; i < ids.size(); ++i) s.reset().bind(remote_ids[i]).bind(ids[i]).run();
  });
}

std::vector<Store::Unsubmitted> Store::unsubmitted(const std::string& backend) {
  Stmt& s = stmt(
      "SELECT id, coalesce(array_parent, id), array_index, user FROM jobs WHERE backend = ? AND remote_id IS NULL AND "
      "state = 'PENDING' ORDER BY id");
  s.bind(backend);
  std::vector<Unsubmitted> out;
  while (s.step()) out.push_back({s.i64(0), s.i64(1), s.opt<int>(2), s.text(3)});
  return out;
}

bool Store::claim_refresh(const std::string& backend, double now, double interval_s) {
  bool claimed = false;
  transaction([&] {
    const std::string key = "refresh." + backend;
    const auto last = meta(key);
    if (last && now - std::atof(last->c_str()) < interval_s) return;
    set_meta(key, fmt::format("{:.3f}", now));
    claimed = true;
  });
  return claimed;
}

void Store::discard(const std::vector<std::int64_t>& ids) {
  transaction([&] {
    Stmt& s = stmt("DELETE FROM jobs WHERE id = ?");
    for (std::int64_t id : ids) s.reset().bind(id).run();
  });
}

void Store::lose_unsubmitted(const std::string& backend, double before_s, double now) {
  stmt(
      "UPDATE jobs SET state = 'LOST', reason = 'SubmitInterrupted', end_s = ? WHERE backend = ? AND "
      "remote_id IS NULL AND state = 'PENDING' AND submit_s < ?")
      .bind(now)
      .bind(backend)
      .bind(before_s)
      .run();
}

std::vector<std::pair<std::int64_t, std::string>> Store::remote_active(const std::string& backend) {
  Stmt& s = stmt(
      "SELECT id, remote_id FROM jobs WHERE state IN ('PENDING', 'RUNNING') AND backend = ? AND remote_id IS NOT NULL "
      "ORDER BY id");
  s.bind(backend);
  std::vector<std::pair<std::int64_t, std::string>> out;
  while (s.step()) out.emplace_back(s.i64(0), s.text(1));
  return out;
}

void Store::update_remote(const std::string& backend, const std::vector<RemoteState>& states, double now) {
  transaction([&] {
    Stmt& s = stmt(
        "UPDATE jobs SET state = ?, reason = ?, held = ?, start_s = coalesce(?, start_s), end_s = ?, exit_code = ?, "
        "signal = ?, attempts = max(attempts, ?), host = coalesce(nullif(?, ''), host) WHERE backend = ? AND "
        "remote_id = ? AND state IN ('PENDING', 'RUNNING')");
    for (const auto& r : states)
      s.reset()
          .bind(state_name(r.state))
          .bind(r.reason)
          .bind(r.held ? 1 : 0)
          .bind(r.start_s)
          .bind(r.end_s || !terminal(r.state) ? r.end_s : std::optional<double>(now))
          .bind(r.exit_code)
          .bind(r.signal)
          .bind(r.attempts)
          .bind(r.host)
          .bind(backend)
          .bind(r.remote_id)
          .run();
  });
}

}  // namespace rkit::rsub
