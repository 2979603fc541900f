// Reading and parsing the variables declared in env_vars.def. Header-only, no dependencies, shared by the
// runtime and the backend. Parsers throw EnvError with a message that names the variable and what it accepts.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace softnpu::env {

enum class Var {
#define SOFTNPU_ENV(name, layer, kind, dflt, doc) name,
#include "env_vars.def"
#undef SOFTNPU_ENV
};

struct Info {
  const char* name;
  const char* layer;
  const char* kind;
  const char* default_text;
  const char* doc;
};

inline constexpr Info kTable[] = {
#define SOFTNPU_ENV(name, layer, kind, dflt, doc) {#name, #layer, #kind, dflt, doc},
#include "env_vars.def"
#undef SOFTNPU_ENV
};

inline const Info& info(Var v) { return kTable[static_cast<int>(v)]; }

struct EnvError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The raw value, or nullptr when unset or empty (both mean "use the default").
inline const char* raw(Var v) {
  const char* s = std::getenv(info(v).name);
  return (s && *s) ? s : nullptr;
}

[[noreturn]] inline void fail(Var v, const std::string& value, const std::string& expected) {
  throw EnvError(std::string(info(v).name) + "='" + value + "' is not valid: expected " + expected + ".");
}

inline bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = x;
  return true;
}

inline int64_t get_int(Var v, int64_t dflt, int64_t lo, int64_t hi) {
  const char* s = raw(v);
  if (!s) return dflt;
  int64_t x = 0;
  if (!parse_int(s, &x) || x < lo || x > hi)
    fail(v, s, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return x;
}

inline bool get_bool(Var v, bool dflt) {
  const char* s = raw(v);
  if (!s) return dflt;
  std::string t(s);
  if (t == "1") return true;
  if (t == "0") return false;
  fail(v, t, "0 or 1");
}

inline std::string get_string(Var v, const std::string& dflt) {
  const char* s = raw(v);
  return s ? std::string(s) : dflt;
}

// One of choices (exact spelling); the index of the value, or dflt when unset.
inline size_t get_choice(Var v, size_t dflt, const std::vector<std::string>& choices) {
  const char* s = raw(v);
  if (!s) return dflt;
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i] == s) return i;
  std::string expected = "one of";
  for (size_t i = 0; i < choices.size(); ++i) expected += (i ? ", " : " ") + choices[i];
  fail(v, s, expected);
}

// Comma-separated integers in [lo, hi], no repeats. Returns false when unset.
inline bool get_list(Var v, int64_t lo, int64_t hi, std::vector<int64_t>* out) {
  const char* s = raw(v);
  if (!s) return false;
  std::string text(s);
  std::string expected = "comma-separated distinct integers from " + std::to_string(lo) + " to " +
                         std::to_string(hi);
  out->clear();
  size_t pos = 0;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t x = 0;
    if (!parse_int(item, &x) || x < lo || x > hi) fail(v, text, expected);
    for (int64_t y : *out)
      if (y == x) fail(v, text, expected);
    out->push_back(x);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return true;
}

}  // namespace softnpu::env
