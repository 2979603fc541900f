// Test support: a strict JSON reader, enough to check that npu-smi --json prints a well-formed document of the
// promised shape.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace softnpu::test {

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;  // in document order

  // The member named key, or null.
  const Json* get(const std::string& key) const {
    for (const auto& [k, v] : object)
      if (k == key) return &v;
    return nullptr;
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& member : object) k.push_back(member.first);
    return k;
  }
};

class JsonReader {
 public:
  // Parses a whole document; throws std::runtime_error at the first error.
  static Json parse(const std::string& text) {
    JsonReader r(text);
    Json v = r.value();
    r.space();
    if (r.i_ != text.size()) r.error("trailing characters");
    return v;
  }

 private:
  explicit JsonReader(const std::string& text) : s_(text) {}

  [[noreturn]] void error(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool take(char c) {
    space();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  void expect(char c) {
    if (!take(c)) error(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }

  Json value() {
    space();
    Json v;
    if (i_ >= s_.size()) error("unexpected end");
    char c = s_[i_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++i_;
      if (take('}')) return v;
      do {
        space();
        std::string key = string();
        expect(':');
        v.object.emplace_back(std::move(key), value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Json::kArray;
      ++i_;
      if (take(']')) return v;
      do v.array.push_back(value());
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::kString;
      v.string = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::kNumber;
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      v.number = std::strtod(begin, &end);
      i_ += size_t(end - begin);
    } else if (literal("true")) {
      v.kind = Json::kBool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Json::kBool;
    } else if (literal("null")) {
      v.kind = Json::kNull;
    } else {
      error("unexpected character");
    }
    return v;
  }

  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') error("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) error("control character in string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (i_ >= s_.size()) error("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) error("short \\u escape");
          unsigned code = unsigned(std::stoul(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          // The tests only need to know the escape is well-formed; keep the code point as UTF-8 for BMP characters.
          if (code < 0x80) {
            out += char(code);
          } else if (code < 0x800) {
            out += char(0xC0 | (code >> 6));
            out += char(0x80 | (code & 0x3F));
          } else {
            out += char(0xE0 | (code >> 12));
            out += char(0x80 | ((code >> 6) & 0x3F));
            out += char(0x80 | (code & 0x3F));
          }
          break;
        }
        default: error("bad escape");
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace softnpu::test
