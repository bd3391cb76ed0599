// SPDX-License-Identifier: BSD-3-Clause
// What the fake NCCL (tests/fake_nccl.cc) counts of the shim's calls into it;
// the tests read it through dlsym("fakeNcclStats"), so both sides share this
// one layout.
#pragma once

struct FakeNcclStats {
  int commsCreated, commsDestroyed, commsAborted;
  int tunerLoads, tunerUnloads, tunerInits, tunerFinalizes, getCollInfoCalls;
  int allReduces, allGathers, revokes;
  char tunerPath[512];
  // NCCL 2.29+ entry points (absent from the build that plays an older NCCL).
  int reduceScatters, allReduceConfigs, allGatherConfigs, reduceScatterConfigs;
  int suspends, resumes, lastSuspendFlags, grows;
  int tunerVersion;        // 6 or 5: the table NCCL found
  int tunerLogLines;       // lines the tuner wrote through NCCL's log function
  char tunerLogLine[256];  // the last of them
};
