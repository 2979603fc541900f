// atc: ONNX to softnpu's offline model (.om), with ATC's command line, messages and exit status.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "atc/options.h"

using softnpu::offline::Status;

namespace {

int failed(const Status& s) {
  std::cout << "ATC run failed, Please check the detail log, Try 'atc --help' for more information" << std::endl;
  std::cout << s.code << ": " << s.message << std::endl;
  if (!s.solution.empty()) std::cout << "        Solution: " << s.solution << std::endl;
  return 255;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

bool write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
  return static_cast<bool>(f.flush());
}

Status file_error(const std::string& key, const std::string& path) {
  return Status::error("E10001", "Value [" + path + "] for parameter [--" + key + "] is invalid: the file cannot be read.",
                       "Check that the file exists and is readable.");
}

}  // namespace

int main(int argc, char** argv) {
  softnpu::atc::Args args;
  auto s = softnpu::atc::parse(argc, argv, &args);
  if (args.help && s.ok) {
    softnpu::atc::print_help();
    return 0;
  }
  std::cout << "ATC start working now, please wait for a moment." << std::endl;
  if (!s.ok) return failed(s);
  bool info = args.log == "info" || args.log == "debug";

  if (args.mode == 1 || args.mode == 6) {
    std::string om;
    if (!read_file(args.om, &om)) return failed(file_error("om", args.om));
    Status st;
    auto model = softnpu::offline::Model::load(om.data(), om.size(), &st);
    if (!model) return failed(st);
    if (args.mode == 1) {
      if (!write_file(args.json, model->to_json()))
        return failed(Status::error("E10001", "Value [" + args.json + "] for parameter [--json] is invalid: cannot write.",
                                    "Check the directory exists and is writable."));
    } else {
      std::cout << model->to_json();
    }
    std::cout << "ATC run success, welcome to the next use." << std::endl;
    return 0;
  }

  std::string onnx;
  if (!read_file(args.model, &onnx)) return failed(file_error("model", args.model));
  if (info) std::cout << "[INFO] converting " << args.model << " for " << args.convert.soc_version << std::endl;
  auto slash = args.model.rfind('/');
  args.convert.model_dir = slash == std::string::npos ? "." : args.model.substr(0, slash);
  auto result = softnpu::offline::convert_onnx(onnx, args.convert);
  if (args.mode == 3) {
    if (!result.report_json.empty() && !write_file(args.check_report, result.report_json))
      return failed(Status::error("E10001", "Value [" + args.check_report + "] for parameter [--check_report] is invalid: cannot write.",
                                  "Check the directory exists and is writable."));
    if (!result.status.ok) return failed(result.status);
    std::cout << "ATC run success, welcome to the next use." << std::endl;
    return 0;
  }
  if (!result.status.ok) return failed(result.status);
  std::string path = args.output + ".om";
  if (!write_file(path, result.om))
    return failed(Status::error("E10001", "Value [" + args.output + "] for parameter [--output] is invalid: cannot write " + path + ".",
                                "Check the directory exists and is writable."));
  if (info) std::cout << "[INFO] wrote " << path << " (" << result.om.size() << " bytes)" << std::endl;
  std::cout << "ATC run success, welcome to the next use." << std::endl;
  return 0;
}
