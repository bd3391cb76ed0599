// SPDX-License-Identifier: BSD-3-Clause
// rcn_engine: a tensor-parallel decode engine that drives rocenante.
//   rcn_engine --model stories260K.bin --tokenizer tok512.bin --prompt "Once upon a time"
//   rcn_engine --device gpu --tp 2 --random-weights --shape llama3-8b --bench --batch 1,8
//   torchrun --nproc-per-node 2 --no-python rcn_engine --model stories260K.bin --tokenizer tok512.bin
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "cpu_runner.h"
#include "input_file.h"
#include "launcher.h"
#include "model.h"
#include "options.h"
#ifdef ENGINE_HAVE_GPU
#include "gpu_runner.h"
#endif

namespace engine {
namespace {

bool wantGpu(const EngineOptions& o) {
  if (o.device == "cpu") return false;
#ifdef ENGINE_HAVE_GPU
  if (o.device == "gpu") {
    requireGpu();
    return true;
  }
  return gpuAvailable();
#else
  if (o.device == "gpu") throw EngineError("this build has no GPU path");
  return false;
#endif
}

// A run whose text or table could not be written (a full disk, a closed
// pipe) has failed, whatever it computed.
int finishOutput(int rc) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return rc;
  throw EngineError(std::string("cannot write the output to stdout") +
                    (!flushed && err ? std::string(": ") + std::strerror(err) : std::string(" (a write failed)")));
}

}  // namespace
}  // namespace engine

int main(int argc, char** argv) {
  int errorFd = -1;  // set in a rank the engine's own launcher started
  try {
    engine::EngineOptions options = engine::parseOptions(argc, argv);
    errorFd = engine::claimErrorFd(options);
    // Read after the model, which may take minutes to load: a wrong path fails now instead.
    if (!options.tokenizerPath.empty()) engine::requireReadable(options.tokenizerPath, "tokenizer");
    engine::adoptExternalLaunch(options);  // under torchrun / mpirun / srun: this process is one rank
    if (engine::wantGpu(options)) {
#ifdef ENGINE_HAVE_GPU
      return engine::finishOutput(engine::runGpu(options, argc, argv));
#endif
    }
    engine::requireCpuOptions(options);
    return engine::finishOutput(engine::runCpu(options, argc, argv));
  } catch (const std::bad_alloc&) {
    // The model (weights, or one rank's whole checkpoint before it is
    // sharded) is larger than this machine's memory.
    engine::reportError("out of host memory (std::bad_alloc): the model needs more memory than this machine has", errorFd);
    return 1;
  } catch (const std::exception& e) {
    engine::reportError(e.what(), errorFd);
    return 1;
  }
}
