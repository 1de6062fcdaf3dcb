// File: libcommon/src/cgroup_parse.cpp — the kernel's text parsed (rkit/cgroup.hpp: mountinfo,
// keyed and single values, pid lists) and this machine's cgroup layout found from it.
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "cgroup_impl.hpp"
#include "rkit/cgroup.hpp"

namespace rkit {

using namespace cgroup_detail;

namespace {

std::optional<std::uint64_t> to_u64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out += static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo) {
  std::vector<CgroupMount> out;
  for (std::string_view line : split(mountinfo, '\n')) {
    std::vector<std::string_view> f;
    for (std::string_view t : split(line, ' '))
      if (!t.empty()) f.push_back(t);
    // id parent major:minor root mountpoint options [optional...] - fstype source superoptions
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    const std::string_view fstype = f[dash + 1];
    CgroupMount m;
    m.path = unescape_octal(f[4]);
    if (fstype == "cgroup2") {
      m.unified = true;
    } else if (fstype == "cgroup") {
      if (dash + 3 >= f.size()) continue;
      for (std::string_view opt : split(f[dash + 3], ',')) {
        static constexpr std::string_view kNotControllers[] = {
            "rw", "ro", "noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods", "none", "all"};
        if (opt.empty() || opt.find('=') != std::string_view::npos ||
            std::find(std::begin(kNotControllers), std::end(kNotControllers), opt) != std::end(kNotControllers))
          continue;
        m.controllers.emplace_back(opt);
      }
      if (m.controllers.empty()) continue;  // a named hierarchy (name=systemd)
    } else {
      continue;
    }
    out.push_back(std::move(m));
  }
  return out;
}

CgroupLayout choose_cgroup_layout(const std::vector<CgroupMount>& mounts) {
  CgroupLayout v1;
  for (const auto& m : mounts)
    if (!m.unified)
      for (const auto& c : m.controllers) v1.v1.emplace(c, m.path);  // the first mount of each wins
  for (auto c : kV1Controllers)
    if (v1.v1.count(std::string(c))) {
      v1.version = CgroupVersion::V1;
      return v1;
    }
  for (const auto& m : mounts) {
    if (!m.unified) continue;
    const auto& cs = m.controllers;
    if (std::find(cs.begin(), cs.end(), "memory") != cs.end() || std::find(cs.begin(), cs.end(), "pids") != cs.end()) {
      CgroupLayout v2;
      v2.version = CgroupVersion::V2;
      v2.unified = m.path;
      return v2;
    }
  }
  return {};
}

const CgroupLayout& cgroup_layout() {
  static const CgroupLayout layout = [] {
    if (::geteuid() != 0) return CgroupLayout{};
    const auto text = read_text("/proc/self/mountinfo");
    if (!text) return CgroupLayout{};
    std::vector<CgroupMount> mounts = parse_cgroup_mounts(*text);
    for (auto& m : mounts)
      if (m.unified)
        if (const auto cs = read_text(m.path + "/cgroup.controllers"))
          for (const auto& c : split_words(*cs)) m.controllers.push_back(c);
    return choose_cgroup_layout(mounts);
  }();
  return layout;
}

CgroupVersion cgroup_version() { return cgroup_layout().version; }

std::optional<std::uint64_t> parse_keyed_value(std::string_view text, std::string_view key) {
  for (std::string_view line : split(text, '\n')) {
    line = trim(line);
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.substr(0, sp) != key) continue;
    return to_u64(trim(line.substr(sp + 1)));
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_single_value(std::string_view text) { return to_u64(trim(text)); }

std::vector<pid_t> parse_pid_list(std::string_view text) {
  std::vector<pid_t> out;
  for (std::string_view line : split(text, '\n'))
    if (auto v = to_u64(trim(line)); v && *v > 0 && *v <= 0x3fffffff) out.push_back(static_cast<pid_t>(*v));
  return out;
}

}  // namespace rkit
