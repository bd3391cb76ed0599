// SPDX-License-Identifier: BSD-3-Clause
// Every tunable is read through this table (params.def), so each one has one
// name, one default and one line of documentation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rocenante/rocenante.h"

namespace rcn {

enum class ParamId {
#define RCN_PARAM(id, name, kind, def, allowed, doc) id,
#include "core/params.def"
#include "core/params_test.def"
#undef RCN_PARAM
  Count
};

enum class ParamKind { INT, STR, BOOL };

struct ParamInfo {
  ParamId id;
  const char* name;  // without the ROCENANTE_ prefix
  ParamKind kind;
  const char* defaultText;
  const char* allowed;  // INT: a range "lo..hi"; STR: choices "a|b|c"; empty: any
  const char* doc;
};

const std::vector<ParamInfo>& paramTable();

// Values come from the environment on each read (cheap; never on hot paths):
// a communicator reads what it needs while it is created and keeps it.
// A malformed INT, or one outside its range, is logged once and the default
// is used; paramValidate() reports them as errors at communicator
// creation.
int64_t paramInt(ParamId id);
// Whether the environment sets the parameter (to anything, even a malformed value).
bool paramIsSet(ParamId id);
// The table's default of an INT parameter.
int64_t paramDefaultInt(ParamId id);

// True the first time `key` is asked about in this process: for warnings
// that every communicator's creation would otherwise repeat.
bool firstTimeInProcess(const std::string& key);
bool paramBool(ParamId id);
std::string paramStr(ParamId id);
// An INT or BOOL parameter that overrides something else only where it is
// set: *set is false when the variable is unset or empty. Malformed, or
// outside its row's range: rcnInvalidArgument, with a warning naming it.
rcnResult_t paramIntIfSet(ParamId id, bool* set, int64_t* value);
rcnResult_t paramBoolIfSet(ParamId id, bool* set, bool* value);
// A STR parameter with choices (its row's "a|b|c"): the value, or the row's
// default when unset or empty. A value that is not a choice is refused with a
// warning naming the variable and the choices.
rcnResult_t paramChoice(ParamId id, std::string* value);

// Parses text as the parameter's kind. Returns false with a reason on bad input.
bool parseIntText(const std::string& text, int64_t* value, std::string* why);
bool parseBoolText(const std::string& text, bool* value, std::string* why);

// rcnInvalidArgument, naming the variable and the bad value, if any set
// ROCENANTE_* variable does not parse or is not allowed by its row. Names not in
// the table are warned about only.
rcnResult_t paramValidate();

// A canonical "NAME=value;..." text of every parameter that must agree across
// ranks (thresholds, transport choice, forcing), hashed in the init vote.
std::string paramAgreementText();

}  // namespace rcn
