#include "format.h"

#include <cstdio>

namespace npu_smi {

uint64_t to_mib(uint64_t bytes) { return (bytes + (uint64_t(1) << 19)) >> 20; }

int percent_of(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0 : static_cast<int>((100.0 * double(part)) / double(whole) + 0.5);
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  return buf;
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s.substr(0, width) : s + std::string(width - s.size(), ' ');
}

void BoxTable::rule(char fill) {
  out_ << '+';
  for (size_t w : kWidths) out_ << std::string(w + 2, fill) << '+';
  out_ << '\n';
}

void BoxTable::full_rule() {
  out_ << '+' << std::string(kWidths[0] + kWidths[1] + kWidths[2] + 8, '-') << "+\n";
}

void BoxTable::wide(const std::string& text) {
  size_t width = kWidths[0] + kWidths[1] + kWidths[2] + 6;  // the two inner borders and their spaces
  out_ << "| " << pad(text, width) << " |\n";
}

void BoxTable::row(const std::string& a, const std::string& b, const std::string& c) {
  out_ << "| " << pad(a, kWidths[0]) << " | " << pad(b, kWidths[1]) << " | " << pad(c, kWidths[2] + 1) << "|\n";
}

void print_fields(std::ostream& out, const Fields& fields) {
  for (const auto& [key, value] : fields) {
    if (key.empty()) out << '\n';
    else out << '\t' << (key.size() < 30 ? pad(key, 30) : key) << " : " << value << '\n';
  }
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0.
size_t utf8_length(const std::string& s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0xC2 || c > 0xF4) return 0;  // a continuation byte, an overlong lead, or beyond U+10FFFF
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  static constexpr unsigned kMin[5] = {0, 0, 0x80, 0x800, 0x10000};  // smallest code point of each length
  unsigned code = c & (0x7F >> n);
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  return (code < kMin[n] || code > 0x10FFFF || surrogate) ? 0 : n;
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else if (c >= 0x80) {
      size_t n = utf8_length(s, i);
      out += n ? s.substr(i, n) : "\\ufffd";
      i += n ? n : 1;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace npu_smi
