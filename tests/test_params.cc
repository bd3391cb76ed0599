// SPDX-License-Identifier: BSD-3-Clause
// The parameter table: parsing, defaults, validation and its documentation.
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/comm.h"
#include "core/log.h"
#include "core/params.h"
#include "support/scoped_env.h"

using rcn::ParamId;

using rcn::test::ScopedEnv;

TEST_CASE("integers parse with suffixes and reject garbage") {
  int64_t v = 0;
  std::string why;
  CHECK(rcn::parseIntText("42", &v, &why));
  CHECK(v == 42);
  CHECK(rcn::parseIntText(" 64K ", &v, &why));
  CHECK(v == 65536);
  CHECK(rcn::parseIntText("2M", &v, &why));
  CHECK(v == 2 * 1024 * 1024);
  CHECK(rcn::parseIntText("1g", &v, &why));
  CHECK(v == (1ll << 30));
  CHECK(rcn::parseIntText("0x10", &v, &why));
  CHECK(v == 16);
  CHECK(rcn::parseIntText("-1", &v, &why));
  CHECK(v == -1);
  CHECK(rcn::parseIntText("010", &v, &why));  // decimal, not octal
  CHECK(v == 10);
  CHECK(rcn::parseIntText("08", &v, &why));
  CHECK(v == 8);
  CHECK_FALSE(rcn::parseIntText("99999999999999999999", &v, &why));
  CHECK(why.find("out of range") != std::string::npos);
  CHECK_FALSE(rcn::parseIntText("", &v, &why));
  CHECK_FALSE(rcn::parseIntText("12abc", &v, &why));
  CHECK(why.find("12abc") != std::string::npos);
  CHECK_FALSE(rcn::parseIntText("lots", &v, &why));
  CHECK_FALSE(rcn::parseIntText("99999999999999G", &v, &why));
  CHECK(why.find("range") != std::string::npos);
}

TEST_CASE("booleans accept the usual spellings") {
  bool b = false;
  std::string why;
  for (const char* t : {"1", "true", "YES", "on"}) {
    CHECK(rcn::parseBoolText(t, &b, &why));
    CHECK(b);
  }
  for (const char* f : {"0", "False", "no", "OFF"}) {
    CHECK(rcn::parseBoolText(f, &b, &why));
    CHECK_FALSE(b);
  }
  CHECK_FALSE(rcn::parseBoolText("maybe", &b, &why));
  CHECK(why.find("maybe") != std::string::npos);
}

TEST_CASE("parameters read the environment and fall back to defaults") {
  unsetenv("ROCENANTE_LL_MAX_BYTES");
  CHECK(rcn::paramInt(ParamId::LlMaxBytes) == 262144);
  {
    ScopedEnv env("ROCENANTE_LL_MAX_BYTES", "128K");
    CHECK(rcn::paramInt(ParamId::LlMaxBytes) == 131072);
  }
  {
    ScopedEnv env("ROCENANTE_DISABLE", "yes");
    CHECK(rcn::paramBool(ParamId::Disable));
  }
  CHECK_FALSE(rcn::paramBool(ParamId::Disable));
  {
    ScopedEnv env("ROCENANTE_TIMEOUT_MS", "soon");
    CHECK(rcn::paramInt(ParamId::TimeoutMs) == 10000);  // malformed: default, with a warning
  }
}

TEST_CASE("peer waits take ROCENANTE_TIMEOUT_MS, or under the shim while it is unset ROCENANTE_SHIM_TIMEOUT_MS") {
  unsetenv("ROCENANTE_TIMEOUT_MS");
  unsetenv("ROCENANTE_SHIM_TIMEOUT_MS");
  ncclComm_t someNccl = reinterpret_cast<ncclComm_t>(uintptr_t{1});  // never dereferenced
  rcnComm native;  // the native API, its own NCCL communicator
  native.nccl = someNccl;
  rcnComm hostBackend;  // no NCCL at all
  hostBackend.nccl = nullptr;
  hostBackend.ownsNccl = false;
  rcnComm shim;  // built over the user's communicator
  shim.nccl = someNccl;
  shim.ownsNccl = false;
  CHECK(rcn::peerWaitMs(&native) == 10000);
  CHECK(rcn::peerWaitMs(&hostBackend) == 10000);
  CHECK(rcn::peerWaitMs(&shim) == 1800000);
  {
    ScopedEnv env("ROCENANTE_SHIM_TIMEOUT_MS", "5000");
    CHECK(rcn::peerWaitMs(&shim) == 5000);
    CHECK(rcn::peerWaitMs(&native) == 10000);
  }
  {
    ScopedEnv env("ROCENANTE_TIMEOUT_MS", "3000");
    ScopedEnv shimEnv("ROCENANTE_SHIM_TIMEOUT_MS", "5000");
    CHECK(rcn::peerWaitMs(&shim) == 3000);  // set explicitly, it holds everywhere
    CHECK(rcn::peerWaitMs(&native) == 3000);
  }
}

TEST_CASE("a parameter with choices reads as one of them, its default when empty, else an error") {
  std::string value;
  {
    ScopedEnv env("ROCENANTE_TRANSPORT", " p2p ");
    REQUIRE(rcn::paramChoice(ParamId::Transport, &value) == rcnSuccess);
    CHECK(value == "p2p");
  }
  {
    ScopedEnv env("ROCENANTE_TRANSPORT", "");  // as if unset, like every reader of the table
    REQUIRE(rcn::paramChoice(ParamId::Transport, &value) == rcnSuccess);
    CHECK(value == "auto");
  }
  {
    ScopedEnv env("ROCENANTE_GDR", "yes");
    CHECK(rcn::paramChoice(ParamId::Gdr, &value) == rcnInvalidArgument);
  }
  {
    ScopedEnv env("ROCENANTE_FORCE", "");
    REQUIRE(rcn::paramChoice(ParamId::Force, &value) == rcnSuccess);
    CHECK(value.empty());  // the row's default: force nothing
  }
}

TEST_CASE("validation names the malformed variable") {
  CHECK(rcn::paramValidate() == rcnSuccess);
  ScopedEnv env("ROCENANTE_MAX_BLOCKS", "many");
  CHECK(rcn::paramValidate() == rcnInvalidArgument);
  CHECK(std::string(rcn::lastErrorText()).find("ROCENANTE_MAX_BLOCKS") != std::string::npos);
}

// Both ends of a range are allowed, one past either is not; a value the row
// does not allow reads as the default until creation refuses it.
TEST_CASE("values outside a row's range or choices are refused") {
  for (const char* ok : {"1", "1024", "1K"}) {
    ScopedEnv env("ROCENANTE_PROXY_THREADS", ok);
    INFO(ok);
    CHECK(rcn::paramValidate() == rcnSuccess);
  }
  for (const char* bad : {"0", "1025", "-3", "4294967297"}) {
    ScopedEnv env("ROCENANTE_PROXY_THREADS", bad);
    INFO(bad);
    CHECK(rcn::paramValidate() == rcnInvalidArgument);
    CHECK(rcn::paramInt(ParamId::ProxyThreads) == 6);
  }
  {
    ScopedEnv env("ROCENANTE_PROXY_SPIN_US", "-1");
    CHECK(rcn::paramValidate() == rcnInvalidArgument);
  }
  {
    ScopedEnv env("ROCENANTE_P2P_IPC", "legacy");
    CHECK(rcn::paramValidate() == rcnSuccess);
    CHECK(rcn::paramStr(ParamId::P2pIpc) == "legacy");
  }
  {
    ScopedEnv env("ROCENANTE_P2P_IPC", "legcy");
    CHECK(rcn::paramValidate() == rcnInvalidArgument);
  }
  {
    ScopedEnv env("ROCENANTE_WIRE", "");  // empty: left to its reader (auto)
    CHECK(rcn::paramValidate() == rcnSuccess);
  }
}

// A row whose range does not parse, or whose default it refuses, would make
// every read of that parameter fall back and warn.
TEST_CASE("every row allows its own default") {
  for (const rcn::ParamInfo& p : rcn::paramTable()) {
    INFO("ROCENANTE_" << p.name << " allowed '" << p.allowed << "'");
    const std::string allowed = p.allowed;
    if (p.kind == rcn::ParamKind::INT && !allowed.empty()) {
      const size_t dots = allowed.find("..");
      REQUIRE(dots != std::string::npos);
      int64_t lo = 0, hi = 0, def = 0;
      std::string why;
      REQUIRE(rcn::parseIntText(allowed.substr(0, dots), &lo, &why));
      REQUIRE(rcn::parseIntText(allowed.substr(dots + 2), &hi, &why));
      if (*p.defaultText == '\0') continue;  // unset by default (MAX_BYTES: the policy decides)
      REQUIRE(rcn::parseIntText(p.defaultText, &def, &why));
      CHECK((lo <= def && def <= hi));
    }
    if (p.kind == rcn::ParamKind::BOOL) CHECK(allowed.empty());
    if (p.kind != rcn::ParamKind::INT) CHECK(allowed.find("..") == std::string::npos);
  }
}

TEST_CASE("the agreement text changes with agreed parameters only") {
  std::string base = rcn::paramAgreementText();
  {
    ScopedEnv env("ROCENANTE_MAX_BYTES", "4096");
    CHECK(rcn::paramAgreementText() != base);
  }
  {
    ScopedEnv env("ROCENANTE_DEBUG", "INFO");
    CHECK(rcn::paramAgreementText() == base);
  }
  for (const char* unsetLike : {"", " "}) {  // every reader takes these as the default: ranks agree
    ScopedEnv env("ROCENANTE_TRANSPORT", unsetLike);
    CHECK(rcn::paramAgreementText() == base);
  }
}

TEST_CASE("every parameter is documented in docs/PARAMS.md") {
  std::ifstream file(RCN_PARAMS_DOC);
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  for (const rcn::ParamInfo& p : rcn::paramTable()) {
    INFO("ROCENANTE_" << p.name);
    CHECK(text.str().find(std::string("`ROCENANTE_") + p.name + "`") != std::string::npos);
  }
}

// A row's description is one line of the table in docs/PARAMS.md; what does
// not fit belongs in a guide.
TEST_CASE("every parameter's description fits one line of at most 120 characters") {
  for (const rcn::ParamInfo& p : rcn::paramTable()) {
    INFO("ROCENANTE_" << p.name << ": " << p.doc);
    CHECK(std::strlen(p.doc) <= 120);
    CHECK(std::strchr(p.doc, '\n') == nullptr);
  }
}
