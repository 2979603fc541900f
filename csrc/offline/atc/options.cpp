#include "atc/options.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace softnpu::atc {

namespace {

using offline::Status;

const std::set<std::string> kPrecisionModes = {"force_fp16",          "force_fp32",         "allow_fp32_to_fp16",
                                               "must_keep_origin_dtype", "allow_mix_precision", "allow_mix_precision_fp16"};
const std::set<std::string> kFormats = {"NCHW", "NHWC", "ND", "NCDHW", "NDHWC"};
const std::set<std::string> kLogLevels = {"debug", "info", "warning", "error", "null"};

Status bad_value(const std::string& key, const std::string& value, const std::string& solution) {
  return Status::error("E10001", "Value [" + value + "] for parameter [--" + key + "] is invalid.", solution);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

bool parse_int(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0';
}

bool parse_int_list(const std::string& s, std::vector<int64_t>* out) {
  out->clear();
  for (const auto& part : split(s, ',')) {
    int64_t v;
    if (!parse_int(part, &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

Status apply(const std::string& key, const std::string& value, Args* a) {
  auto& c = a->convert;
  if (key == "model") {
    a->model = value;
  } else if (key == "framework") {
    int64_t v;
    if (!parse_int(value, &v) || v != 5)
      return bad_value(key, value, "softnpu's atc converts ONNX models: use --framework=5.");
    a->framework = static_cast<int>(v);
  } else if (key == "output") {
    a->output = value;
  } else if (key == "soc_version") {
    c.soc_version = value;
  } else if (key == "input_shape") {
    for (const auto& entry : split(value, ';')) {
      auto colon = entry.rfind(':');
      std::vector<int64_t> dims;
      if (colon == std::string::npos || colon == 0 || !parse_int_list(entry.substr(colon + 1), &dims) ||
          std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < -1; }))
        return Status::error("E10002", "Value [" + value + "] for parameter [--input_shape] is invalid: entry [" + entry + "].",
                             "Give input shapes as \"name:n,c,h,w;name2:...\", with -1 for a dynamic dim.");
      c.input_shapes.emplace_back(entry.substr(0, colon), dims);
    }
  } else if (key == "input_format") {
    if (!kFormats.count(value)) return bad_value(key, value, "Use one of NCHW, NHWC, ND, NCDHW, NDHWC.");
    c.input_format = value;
  } else if (key == "out_nodes") {
    c.out_nodes = split(value, ';');
  } else if (key == "precision_mode") {
    if (!kPrecisionModes.count(value))
      return bad_value(key, value, "Use one of force_fp16, force_fp32, allow_fp32_to_fp16, must_keep_origin_dtype, "
                                   "allow_mix_precision, allow_mix_precision_fp16.");
    c.precision_mode = value;
  } else if (key == "dynamic_batch_size") {
    if (!parse_int_list(value, &c.dynamic_batch_sizes) || c.dynamic_batch_sizes.size() < 2 ||
        c.dynamic_batch_sizes.size() > 100 ||
        std::any_of(c.dynamic_batch_sizes.begin(), c.dynamic_batch_sizes.end(), [](int64_t b) { return b < 1; }))
      return bad_value(key, value, "Give 2 to 100 positive batch sizes, e.g. \"1,2,4,8\".");
  } else if (key == "dynamic_dims") {
    for (const auto& profile : split(value, ';')) {
      std::vector<int64_t> dims;
      if (!parse_int_list(profile, &dims) || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 1; }))
        return bad_value(key, value, "Give profiles as \"d1,d2;d1,d2\", one positive value per -1 dim.");
      c.dynamic_dims.push_back(dims);
    }
    if (c.dynamic_dims.size() < 2 || c.dynamic_dims.size() > 100)
      return bad_value(key, value, "Give 2 to 100 profiles.");
  } else if (key == "log") {
    if (!kLogLevels.count(value)) return bad_value(key, value, "Use one of debug, info, warning, error, null.");
    a->log = value;
  } else if (key == "mode") {
    int64_t v;
    if (!parse_int(value, &v) || (v != 0 && v != 1 && v != 3 && v != 6))
      return bad_value(key, value, "Use 0 (convert), 1 (offline model to JSON), 3 (pre-check only) or 6 (display model info).");
    a->mode = static_cast<int>(v);
  } else if (key == "om") {
    a->om = value;
  } else if (key == "json") {
    a->json = value;
  } else if (key == "check_report") {
    a->check_report = value;
  } else {
    return Status::error("E10001", "Parameter [--" + key + "] is not supported.", "Try 'atc --help' for the options.");
  }
  return Status{};
}

}  // namespace

Status parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    a->convert.command_line += (i > 1 ? " " : "") + std::string(argv[i]);
  }
  a->convert.command_line = "atc " + a->convert.command_line;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      a->help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0)
      return Status::error("E10001", "Argument [" + arg + "] is not an option.", "Give options as --key=value or --key value.");
    std::string key = arg.substr(2), value;
    auto eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Status::error("E10001", "Parameter [--" + key + "] has no value.", "Give it as --" + key + "=value.");
    }
    auto s = apply(key, value, a);
    if (!s.ok) return s;
  }
  if (a->help) return Status{};
  const auto& c = a->convert;
  if (!c.dynamic_batch_sizes.empty() && !c.dynamic_dims.empty())
    return Status::error("E10001", "Parameters [--dynamic_batch_size] and [--dynamic_dims] cannot be given together.",
                         "Keep one of them.");
  auto require = [&](const std::string& key, const std::string& value) {
    return value.empty() ? Status::error("E10001", "Parameter [--" + key + "] is required in mode " + std::to_string(a->mode) + ".",
                                         "Give --" + key + ".")
                         : Status{};
  };
  if (a->mode == 0 || a->mode == 3) {
    for (auto [k, v] : {std::pair<std::string, std::string>{"model", a->model}, {"soc_version", c.soc_version}}) {
      auto s = require(k, v);
      if (!s.ok) return s;
    }
    if (a->framework != 5) return Status::error("E10001", "Parameter [--framework] is required.", "Give --framework=5 (ONNX).");
    if (a->mode == 0) {
      auto s = require("output", a->output);
      if (!s.ok) return s;
    }
  } else if (a->mode == 1) {
    for (auto [k, v] : {std::pair<std::string, std::string>{"om", a->om}, {"json", a->json}}) {
      auto s = require(k, v);
      if (!s.ok) return s;
    }
  } else if (a->mode == 6) {
    auto s = require("om", a->om);
    if (!s.ok) return s;
  }
  return Status{};
}

void print_help() {
  std::puts(
      "usage: atc <args>\n"
      "  --mode             0: convert a model (default); 1: offline model to JSON (--om, --json);\n"
      "                     3: pre-check only (--check_report); 6: display offline model info (--om)\n"
      "  --model            the ONNX model file\n"
      "  --framework        5 (ONNX)\n"
      "  --output           the offline model to write (\".om\" is appended)\n"
      "  --soc_version      the chip to convert for: Ascend and the Name `npu-smi info` shows (Ascend910B3)\n"
      "  --input_shape      \"name:n,c,h,w;name2:...\"; -1 marks a dynamic dim\n"
      "  --input_format     NCHW (default), NHWC, ND, NCDHW, NDHWC\n"
      "  --out_nodes        \"node:index;node2:index\": the outputs to keep\n"
      "  --precision_mode   force_fp16 (default), force_fp32, allow_fp32_to_fp16, must_keep_origin_dtype,\n"
      "                     allow_mix_precision, allow_mix_precision_fp16\n"
      "  --dynamic_batch_size \"1,2,4\": batch profiles for inputs with -1 in dim 0\n"
      "  --dynamic_dims     \"d1,d2;d1,d2\": profiles of the -1 dims of --input_shape\n"
      "  --log              debug, info, warning, error, null (default)\n"
      "  --om, --json       mode 1 and 6: the offline model to read, the JSON to write\n"
      "  --check_report     mode 3: the pre-check report to write (default check_result.json)\n"
      "Options are given as --key=value or --key value.");
}

}  // namespace softnpu::atc
