// SPDX-License-Identifier: BSD-3-Clause
// The command-line reader of allreduce_sweep, rcn_engine and rocenante-probe:
// "--name value", "--name=value" and switches, checked against a table of the
// options a program takes. Header-only, so that the engine, which links only
// the public library, uses the same copy.
#pragma once

#include <string>
#include <vector>

namespace rcn {

struct CliOption {
  const char* name;  // "--gpus", or "-h"
  bool takesValue;
};

struct CliArg {
  std::string name;
  std::string value;  // empty for a switch
};

namespace detail {

inline const CliOption* findCliOption(const std::vector<CliOption>& table, const std::string& name) {
  for (const CliOption& option : table)
    if (name == option.name) return &option;
  return nullptr;
}

}  // namespace detail

// argv[1..] as options of the table, in order. Fails with why naming the
// option for one the table lacks ("unknown option --x"), a value given to a
// switch ("--x=1": "--x takes no value") and a missing value ("--x needs a
// value"; "--x needs a value, not the option --y" where the next word is an
// option of the table: the inline form --x=--y takes any text).
inline bool parseCli(int argc, const char* const* argv, const std::vector<CliOption>& table, std::vector<CliArg>* out,
                     std::string* why) {
  std::vector<CliArg> args;
  for (int i = 1; i < argc; ++i) {
    CliArg arg{argv[i], ""};
    const size_t eq = arg.name.find('=');
    const bool inlineValue = arg.name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inlineValue) {
      arg.value = arg.name.substr(eq + 1);
      arg.name.resize(eq);
    }
    const CliOption* option = detail::findCliOption(table, arg.name);
    if (!option) {
      *why = "unknown option " + arg.name;
      return false;
    }
    if (!option->takesValue && inlineValue) {
      *why = arg.name + " takes no value";
      return false;
    }
    if (option->takesValue && !inlineValue) {
      if (i + 1 >= argc) {
        *why = arg.name + " needs a value";
        return false;
      }
      arg.value = argv[++i];
      if (detail::findCliOption(table, arg.value)) {
        *why = arg.name + " needs a value, not the option " + arg.value;
        return false;
      }
    }
    args.push_back(std::move(arg));
  }
  *out = std::move(args);
  return true;
}

}  // namespace rcn
