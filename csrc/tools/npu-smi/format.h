// Text building blocks of npu-smi's output: Ascend-style box tables, "Key : Value" lines, JSON strings.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace npu_smi {

// Bytes in MiB, rounded to the nearest.
uint64_t to_mib(uint64_t bytes);
// part / whole in percent, rounded; 0 when whole is 0.
int percent_of(uint64_t part, uint64_t whole);
// value with a fixed number of decimals.
std::string fixed(double value, int decimals);
// s left-justified in width columns, cut if longer.
std::string pad(const std::string& s, size_t width);

// The three-column box of Ascend's `npu-smi info` on the 910 series; the third column's text may take its closing
// space, as Ascend's header does:
//   +---------------------------+---------------+----------------------------------------------------+
//   | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
class BoxTable {
 public:
  static constexpr size_t kWidths[3] = {25, 13, 50};

  explicit BoxTable(std::ostream& out) : out_(out) {}
  void rule(char fill = '-');                                // +-----+-----+-----+
  void full_rule();                                          // +-----------------+
  void wide(const std::string& text);                        // | text across the whole box |
  void row(const std::string& a, const std::string& b, const std::string& c);

 private:
  std::ostream& out_;
};

// "Key : Value" lines, as `npu-smi info -l`, `-t ...` print them: a tab, the key left-justified in 30 columns,
// " : ", the value (scripts read the value from column 34). An entry with an empty key is an empty line.
using Fields = std::vector<std::pair<std::string, std::string>>;
void print_fields(std::ostream& out, const Fields& fields);

// A JSON string literal: quotes, backslashes and control characters escaped; bytes that are not UTF-8 (a process
// name is any bytes) become U+FFFD, so the document stays valid.
std::string json_string(const std::string& s);

}  // namespace npu_smi
