// File: tools/rtop/serve_http.hpp — private to rtop serve's HTTP side (serve.cpp,
// serve_connection.cpp): the names both use for a connection's clock and stages, and
// how a non-blocking socket call says it would have waited.
//
//   if (n < 0 && would_block(errno)) break;   // nothing more now: poll again
#pragma once

#include <cerrno>

#include "serve.hpp"

namespace rkit::rtop::detail {

using Clock = ClientConnection::Clock;
using Stage = ClientConnection::Stage;
using End = ClientConnection::End;

// Whether a non-blocking call failed only because it would have waited (EAGAIN, EWOULDBLOCK).
inline bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace rkit::rtop::detail
