// SPDX-License-Identifier: BSD-3-Clause
// MockScope: the software NIC of verbs_mock.h installed as the verbs table,
// with a fake sysfs of two ConnectX devices, for the duration of a test.
#pragma once

#if ROCENANTE_HAVE_IBVERBS

#include <cstdlib>

#include "test_verbs_fake_sysfs.h"
#include "verbs_mock.h"

namespace rcn::test {

// Installs the software NIC and a fake sysfs for the duration of a test.
struct MockScope {
  VerbsApi api;
  FakeSysfs sysfs;
  explicit MockScope(const MockOptions& options = {}, const std::vector<MockDevice>& devices = {}) {
    mock::configure(devices, options);
    api = mock::api();
    addConnectXGids(sysfs, "mlx5_0", 1);
    addConnectXGids(sysfs, "mlx5_1", 1);
    for (const char* name : {"ROCENANTE_IB_HCA", "NCCL_IB_HCA", "ROCENANTE_IB_GID_INDEX", "NCCL_IB_GID_INDEX",
                             "ROCENANTE_IB_FLAGS", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_TC", "NCCL_IB_SL",
                             "ROCENANTE_IB_TIMEOUT", "ROCENANTE_IB_TC"})
      unsetenv(name);
    setVerbsApiForTest(&api);
    setVerbsSysfsRootForTest(sysfs.root().c_str());
    mock::start();
  }
  ~MockScope() {
    mock::stop();
    setVerbsApiForTest(nullptr);
    setVerbsSysfsRootForTest(nullptr);
  }
};

}  // namespace rcn::test

#endif  // ROCENANTE_HAVE_IBVERBS
