// GPU presence for tests: a GPU test calls requireGpus(n) first; with fewer
// GPUs it prints why and exits 77, which ctest reports as skipped.
#pragma once

namespace rcn::test {

// Number of CUDA devices, 0 when there is no driver or no GPU. Does not
// create a context, so it is safe before fork().
int gpuCount();

// Exits the process with 77 (skip) unless at least n GPUs are present.
void requireGpus(int n);

}  // namespace rcn::test
