// SPDX-License-Identifier: BSD-3-Clause
// The run-time loader of libibverbs: a library that is absent or lacks a
// symbol is a reason naming it, never a crash; the installed one fills the
// table.
#include <catch2/catch_test_macros.hpp>

#if !ROCENANTE_HAVE_IBVERBS
TEST_CASE("verbs api loader", "[verbs]") { SKIP("built without libibverbs"); }
#else

#include <dlfcn.h>

#include <cstring>
#include <string>

#include "transport/wire/verbs_api.h"

using namespace rcn;

namespace {

bool allRequiredSet(const VerbsApi& a) {
  return a.getDeviceList && a.freeDeviceList && a.getDeviceName && a.openDevice && a.closeDevice && a.queryDevice &&
         a.queryPort && a.queryGid && a.allocPd && a.deallocPd && a.regMr && a.deregMr && a.createCq && a.destroyCq &&
         a.createQp && a.destroyQp && a.modifyQp && a.queryQp && a.postSend && a.pollCq && a.postRecv &&
         a.wcStatusStr && a.portStateStr && a.forkInit && a.getAsyncEvent && a.ackAsyncEvent && a.eventTypeStr;
}

// Every entry is a pointer: an all-null table is all zero bytes.
bool noneSet(const VerbsApi& a) {
  static const VerbsApi empty{};
  return std::memcmp(&a, &empty, sizeof a) == 0;
}

}  // namespace

TEST_CASE("verbs api: a library that does not exist fails, naming it", "[verbs]") {
  VerbsApi api;
  std::memset(&api, 1, sizeof api);  // a failed load leaves no stale entry
  std::string why;
  CHECK_FALSE(loadVerbsApi("librcn-no-such-verbs.so.9", &api, &why));
  INFO(why);
  CHECK(why.find("librcn-no-such-verbs.so.9") != std::string::npos);
  CHECK(noneSet(api));
}

TEST_CASE("verbs api: a library without the verbs symbols fails, naming them", "[verbs]") {
  VerbsApi api;
  std::string why;
  CHECK_FALSE(loadVerbsApi("libc.so.6", &api, &why));
  INFO(why);
  CHECK(why.find("libc.so.6") != std::string::npos);
  CHECK(why.find("ibv_get_device_list") != std::string::npos);
  CHECK(why.find("ibv_query_port") != std::string::npos);
  CHECK(why.find("ibv_reg_dmabuf_mr") == std::string::npos);  // optional
  CHECK(noneSet(api));
}

TEST_CASE("verbs api: libibverbs.so.1 fills every required entry", "[verbs]") {
  void* probe = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!probe) SKIP("libibverbs.so.1 is not installed");
  dlclose(probe);
  VerbsApi api;
  std::string why;
  REQUIRE(loadVerbsApi("libibverbs.so.1", &api, &why));
  CHECK(why.empty());
  CHECK(allRequiredSet(api));
  // Pure functions: safe to call without a device.
  CHECK(std::string(api.wcStatusStr(IBV_WC_SUCCESS)) == "success");
  CHECK_FALSE(std::string(api.portStateStr(IBV_PORT_ACTIVE)).empty());  // wording varies by release
  // The process's own table is the same library's.
  CHECK(allRequiredSet(realVerbsApi()));
  CHECK(realVerbsApi().createQp == api.createQp);
  CHECK(realVerbsApi().regDmabufMr == api.regDmabufMr);
  CHECK(verbsApiUsable(nullptr));
}

TEST_CASE("verbs api: a test's table replaces the real one and nullptr restores it", "[verbs]") {
  VerbsApi empty{};
  setVerbsApiForTest(&empty);
  CHECK(&verbsApi() == &empty);
  std::string why;
  CHECK_FALSE(verbsApiUsable(&why));
  CHECK_FALSE(why.empty());
  setVerbsApiForTest(nullptr);
  CHECK(&verbsApi() == &realVerbsApi());
}

#endif  // ROCENANTE_HAVE_IBVERBS
