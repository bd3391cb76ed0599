// SPDX-License-Identifier: BSD-3-Clause
#include "core/rank_threads.h"

#include <exception>
#include <thread>
#include <vector>

#include "core/log.h"

namespace rcn {

RankFailure runRankThreads(int nranks, const std::function<rcnResult_t(int rank)>& work,
                           const std::function<void(int firstMissing)>& stopStarted) {
  std::vector<rcnResult_t> results(nranks, rcnSuccess);
  std::vector<std::string> causes(nranks);  // each rank's last warning, logged on its own thread
  std::vector<std::thread> threads;
  try {
    threads.reserve(nranks);
    for (int i = 0; i < nranks; ++i)
      threads.emplace_back([&, i] {
        results[i] = work(i);
        if (results[i] != rcnSuccess) causes[i] = lastErrorText();
      });
  } catch (const std::exception& e) {
    // No exception may leave through the C API. The ranks already started
    // would wait for the others until the bootstrap timeout: fail them all.
    const int missing = int(threads.size());
    causes[missing] = "cannot start a thread for each of the " + std::to_string(nranks) + " ranks: " + e.what();
    results[missing] = rcnSystemError;
    for (int i = missing + 1; i < nranks; ++i) results[i] = rcnRemoteError;
    if (stopStarted) stopStarted(missing);
  }
  for (std::thread& t : threads) t.join();
  RankFailure failure;
  for (int i = 0; i < nranks; ++i) {
    const bool better = failure.rank < 0 || (failure.result == rcnRemoteError && results[i] != rcnRemoteError);
    if (results[i] != rcnSuccess && better) failure = {i, results[i], causes[i]};
  }
  return failure;
}

}  // namespace rcn
