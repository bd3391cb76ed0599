// SPDX-License-Identifier: BSD-3-Clause
// A readable stamp in librocenante.so (`strings librocenante.so | grep rocenante-build`)
// so a user can tell which build and which optional features a deployed copy has.
#include "rocenante/rocenante.h"

#define RCN_STR2(x) #x
#define RCN_STR(x) RCN_STR2(x)

#ifdef ROCENANTE_HAVE_IBVERBS
#define RCN_FEATURE_IBVERBS " ibverbs"
#else
#define RCN_FEATURE_IBVERBS ""
#endif
#ifdef ROCENANTE_HAVE_HWLOC
#define RCN_FEATURE_HWLOC " hwloc"
#else
#define RCN_FEATURE_HWLOC ""
#endif
#ifdef ROCENANTE_HAVE_YAML
#define RCN_FEATURE_YAML " yaml-cpp"
#else
#define RCN_FEATURE_YAML ""
#endif

extern "C" __attribute__((visibility("default"), used)) const char rocenante_build_info[] =
    "rocenante-build " RCN_STR(ROCENANTE_MAJOR) "." RCN_STR(ROCENANTE_MINOR) "." RCN_STR(
        ROCENANTE_PATCH) " features:" RCN_FEATURE_IBVERBS RCN_FEATURE_HWLOC RCN_FEATURE_YAML;
