// atc's command line: ATC's options, in both --key=value and --key value forms, checked with ATC's error codes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/model.h"

namespace softnpu::atc {

struct Args {
  int mode = 0;                   // 0 convert, 1 offline model to JSON, 3 pre-check only, 6 display model info
  std::string model, output, om, json, check_report = "check_result.json", log = "null";
  int framework = -1;
  bool help = false;
  offline::ConvertOptions convert;
};

// Parses argv; on failure returns the Status to print (E10001 for a bad value, E10002 for a bad input shape).
offline::Status parse(int argc, char** argv, Args* args);
void print_help();

}  // namespace softnpu::atc
