// File: rsub/core/store_sql.hpp — internal to the job store's files (store*.cpp): the
// columns of a job row (Store::read_job reads them in this order). The connection, its
// statements and its errors are libcommon's (rkit/sqlite.hpp).
#pragma once

namespace rkit::rsub::store_sql {

inline constexpr const char* kJobColumns =
    "id, array_parent, array_index, spec, user, uid, state, reason, held, cancel_requested, submit_s, eligible_s, "
    "start_s, end_s, exit_code, signal, attempts, alloc, host, record_fields, backend, remote_id, cpu_s, "
    "peak_memory_bytes";

}  // namespace rkit::rsub::store_sql
