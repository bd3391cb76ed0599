#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes plugin/real_nccl.h and plugin/forwarders.cc from NCCL's nccl.h.

librocenante.so must export the whole NCCL C API so it can stand in for
libnccl.so.2. Every nccl* function of nccl.h (and its pnccl* twin) becomes an
exported forwarder to the real library; the ones the shim intercepts call
shim.cc instead. libnccl.so.2 also exports a few host functions of the device
API (nccl_device/*.h, which only CUDA compilers can read); their prototypes are
listed below with ABI-equivalent types.

Usage: plugin/gen_forwarders.py NEWEST_NCCL_H FLOOR_NCCL_H plugin/
NEWEST_NCCL_H is the pinned newest header (.deps/nccl-api/<version>/nccl.h from
scripts/install-deps.sh); FLOOR_NCCL_H the oldest header the build must still
compile against. Types the newest header uses and the floor lacks get
ABI-equal fallbacks in real_nccl.h, used where a configure check
(nccl_types.cmake) finds the build's nccl.h without them. The output is
committed; rerun when a new NCCL adds entry points (docs/SHIM.md).
"""
import re
import sys
from pathlib import Path

# Entry points the shim implements (shim.cc); both twins route there.
INTERCEPTED = [
    "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitAll", "ncclCommSplit",
    "ncclCommInitRankScalable", "ncclCommShrink", "ncclCommDestroy", "ncclCommAbort",
    "ncclCommRevoke", "ncclCommFinalize", "ncclCommGetAsyncError", "ncclAllReduce", "ncclAllGather",
    "ncclReduceScatter", "ncclGroupStart",
    "ncclGroupEnd", "ncclGroupSimulateEnd", "ncclGetLastError", "ncclGetErrorString",
    "ncclCommSuspend", "ncclCommResume", "ncclCommGrow",
]

# nccl<Coll>Config(..., const ncclCollConfig_t* config): a config that asks
# nothing (collConfigIsPlain) routes exactly as the plain twin nccl<Coll> does.
CONFIG_SUFFIX = "Config"

# Host functions of the device API, exported by libnccl.so.2 but declared in
# headers only nvcc reads. ncclTeam_t is three ints returned and passed by value.
DEVICE_API = """
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm);
rcnNcclTeam ncclTeamWorld(ncclComm_t comm);
rcnNcclTeam ncclTeamLsa(ncclComm_t comm);
rcnNcclTeam ncclTeamRail(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, rcnNcclTeam team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, rcnNcclTeam team, int rank);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, rcnNcclTeam team, int nBarriers, void* outHandle, void* outReq);
ncclResult_t ncclLsaBarrierCreateRequirement(rcnNcclTeam team, int nBarriers, void* outHandle, void* outReq);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* outHandle, void* outReq);
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, void* props);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, rcnNcclMultimemHandle multimem, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t ncclGetMultimemDeviceLeInfo(ncclWindow_t window, size_t offset, void* leId, size_t* leOffset);
ncclResult_t ncclGetCftDeviceLeInfo(ncclWindow_t window, size_t offset, int peerCft, rcnNcclTeam cftTeam, void* leId, size_t* leOffset);
ncclResult_t ncclGetPeerDeviceLeInfo(ncclWindow_t window, size_t offset, int peerWorld, void* leId, size_t* leOffset);
rcnNcclTeam ncclTeamCft(ncclComm_t comm, int mode);
rcnNcclTeam ncclTeamCftMultimem(ncclComm_t comm);
ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int sizeLog2, void* outHandle, void* outReq);
ncclResult_t ncclGinInboxA2ACreateRequirement(rcnNcclTeam peers, int nBlocks, int sizeLog2, void* outHandle, void* outReq);
"""
DEVICE_API_PREFIXES = ("ncclDevComm", "ncclTeam", "ncclGin", "ncclLsa", "ncclLLA2A", "ncclCommQueryProperties",
                       "ncclGetLsa", "ncclGetMultimem", "ncclGetPeer", "ncclGetCft")
# Exported without a p-twin and without a declaration anywhere: void(void).
UNTWINNED = "void ncclResetDebugInitInternal();\n"

PROTO = re.compile(r"(ncclResult_t|const char\s*\*|void|int|rcnNcclTeam)\s+(p?nccl\w+)\s*\(([^;{]*?)\)\s*;")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse(text):
    """(return type, name, [(type, arg name)]) for each nccl* prototype."""
    found = []
    for ret, name, args in PROTO.findall(" ".join(strip_comments(text).split())):
        if name.startswith("p"):
            continue  # twins are generated from the nccl* name
        params = []
        for i, arg in enumerate(a.strip() for a in args.split(",") if a.strip() and a.strip() != "void"):
            m = re.match(r"(.*?)(\w+)$", arg)
            params.append((m.group(1).strip(), m.group(2)))
        found.append((re.sub(r"\s+", " ", ret).replace(" *", "*"), name, params))
    return found


def version_of(text):
    m = re.search(r"#define NCCL_VERSION_CODE (\d+)", text)
    code = int(m.group(1))
    return "%d.%d.%d" % (code // 10000, code // 100 % 100, code % 100)


def newer_types(protos, newest, floor):
    """[(type, fallback declaration)] for nccl types the prototypes use that the
    floor header lacks: an enum passes as int, a pointer typedef is the same
    pointer to an incomplete struct, a struct must only be passed by pointer."""
    text = " ".join(strip_comments(newest).split())
    used = {}
    for _, _, params in protos:
        for ptype, _ in params:
            for word in re.findall(r"\bnccl\w+_t\b", ptype):
                used.setdefault(word, set()).add("*" in ptype)
    out = []
    for name in sorted(used):
        if re.search(r"\b%s\b" % name, floor):
            continue
        pointer = re.search(r"typedef struct (\w+) ?\* ?%s ?;" % name, text)
        closing = text.find("} %s;" % name)
        kind = text[text.rfind("typedef", 0, closing):].split()[1] if closing >= 0 else None
        if pointer:
            out.append((name, "typedef struct %s* %s;" % (pointer.group(1), name)))
        elif kind == "enum":
            out.append((name, "typedef int %s;  // an enum: passed as int" % name))
        elif kind == "struct":
            assert used[name] == {True}, "%s is passed by value: write its layout by hand" % name
            out.append((name, "typedef struct rcnOpaque_%s %s;  // only passed by pointer" % (name, name)))
        else:
            raise AssertionError("cannot tell what %s is in the newest header" % name)
    return out


def decl(ret, name, params):
    return "%s %s(%s)" % (ret, name, ", ".join("%s %s" % p for p in params))


def fnptr(ret, params):
    return "%s (*)(%s)" % (ret, ", ".join(t for t, _ in params))


def missing_value(ret):
    return {"ncclResult_t": "ncclInvalidUsage", "const char*": '"(entry point missing in the real NCCL)"',
            "int": "-1", "rcnNcclTeam": "rcnNcclTeam{0, 0, 0}", "void": ""}[ret]


def write_header(protos, untwinned, fallbacks, version, out):
    lines = ["// SPDX-License-Identifier: BSD-3-Clause",
             "// Generated by plugin/gen_forwarders.py from NCCL %s's nccl.h; do not edit by hand." % version,
             "// The real NCCL's entry points, resolved once from the library nccl_lib.cc opened.",
             "#pragma once", "",
             "// The Linux build of NCCL: its header declares ncclResetDebugInit only there.",
             "#ifndef NCCL_OS_LINUX", "#define NCCL_OS_LINUX 1", "#endif", "",
             "#include <nccl.h>", "#include <stdint.h>", "",
             "// Types of NCCL %s that an older nccl.h lacks (RCN_NCCL_HAS_<type> comes from the" % version,
             "// configure check of plugin/nccl_types.cmake): the same ABI, not the same text."]
    for name, fallback in fallbacks:
        lines += ["#ifndef RCN_NCCL_HAS_%s" % name, fallback, "#endif"]
    lines += ["",
              "// ncclTeam_t of nccl_device/core.h: three ints, passed and returned by value.",
              "struct rcnNcclTeam {", "  int nRanks, rank, stride;", "};",
              "// ncclMultimemHandle of nccl_device: one pointer, passed by value.",
              "struct rcnNcclMultimemHandle {", "  void* mcBasePtr;", "};", "",
              "namespace rcn::shim {", "", "struct RealNccl {"]
    for ret, name, params in protos + untwinned:
        lines.append("  %s;" % fnptr(ret, params).replace("(*)", "(*" + name + ")"))
    lines += ["};", "",
              "// Every pointer is null where the real library lacks the entry point.",
              "const RealNccl& realNccl();", "",
              "// Logs once that the real NCCL lacks `name`.",
              "void reportMissing(const char* name);", "",
              "// Whether a per-call config asks nothing of the call (null, or every attribute",
              "// at its default), so that nccl<Coll>Config may route as nccl<Coll> does;",
              "// `name` is the entry point, for the log (coll_config.cc).",
              "bool collConfigIsPlain(const ncclCollConfig_t* config, const char* name);", "",
              "// Implemented by shim.cc: the entry points rocenante intercepts."]
    for ret, name, params in protos:
        if name in INTERCEPTED:
            lines.append("%s;" % decl(ret, "shim_" + name, params))
    lines += ["", "}  // namespace rcn::shim", ""]
    (out / "real_nccl.h").write_text("\n".join(lines))


def call(ret, fn, params):
    return "  %s%s(%s);" % ("" if ret == "void" else "return ", fn, ", ".join(n for _, n in params))


def route_body(ret, name, params, plain_twins):
    """The statements that route one call: to shim.cc, to the plain twin's route
    (a config asking nothing), or to the real library."""
    body = []
    if name in INTERCEPTED:
        return [call(ret, "rcn::shim::shim_" + name, params)]
    twin = plain_twins.get(name)
    if twin:
        body.append("  if (rcn::shim::collConfigIsPlain(%s, \"%s\"))" % (params[-1][1], name))
        body.append("  " + call(ret, "route_" + twin[1], twin[2]))
    body.append("  auto fn = rcn::shim::realNccl().%s;" % name)
    body.append("  if (!fn) {")
    body.append("    rcn::shim::reportMissing(\"%s\");" % name)
    body.append("    return %s;" % missing_value(ret) if ret != "void" else "    return;")
    body.append("  }")
    body.append(call(ret, "fn", params))
    return body


def write_forwarders(protos, untwinned, version, out):
    by_name = {name: (ret, name, params) for ret, name, params in protos}
    plain_twins = {name: by_name[name[:-len(CONFIG_SUFFIX)]] for name in by_name
                   if name.endswith(CONFIG_SUFFIX) and name[:-len(CONFIG_SUFFIX)] in by_name}
    parts = ["// SPDX-License-Identifier: BSD-3-Clause",
             "// Generated by plugin/gen_forwarders.py from NCCL %s's nccl.h; do not edit by hand." % version,
             "// Every NCCL entry point, exported, forwarding to the real library (or to",
             "// shim.cc for the calls rocenante intercepts). route_<name> routes a call; the",
             "// exported name and its pnccl twin both call it.",
             "#include \"plugin/real_nccl.h\"", "",
             "#define RCN_NCCL_EXPORT __attribute__((visibility(\"default\")))", "",
             "#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"", "",
             "// The device API's host functions are not declared by nccl.h.",
             "extern \"C\" {"]
    for ret, name, params in protos:
        if name.startswith(DEVICE_API_PREFIXES):
            parts.append("RCN_NCCL_EXPORT %s;" % decl(ret, name, params))
            parts.append("RCN_NCCL_EXPORT %s;" % decl(ret, "p" + name, params))
    for ret, name, params in untwinned:
        parts.append("RCN_NCCL_EXPORT %s;" % decl(ret, name, params))
    parts += ["}", "", "namespace {", ""]
    for ret, name, params in protos + untwinned:
        parts.append("%s {" % decl(ret, "route_" + name, params))
        parts += route_body(ret, name, params, plain_twins)
        parts += ["}", ""]
    parts += ["}  // namespace", ""]
    for ret, name, params in protos:
        for export in (name, "p" + name):
            parts.append("extern \"C\" RCN_NCCL_EXPORT %s {" % decl(ret, export, params))
            parts += [call(ret, "route_" + name, params), "}"]
        parts.append("")
    for ret, name, params in untwinned:
        parts.append("extern \"C\" RCN_NCCL_EXPORT %s {" % decl(ret, name, params))
        parts += [call(ret, "route_" + name, params), "}", ""]
    (out / "forwarders.cc").write_text("\n".join(parts))


def write_resolver_table(protos, untwinned, version, out):
    lines = ["// SPDX-License-Identifier: BSD-3-Clause",
             "// Generated by plugin/gen_forwarders.py from NCCL %s's nccl.h; do not edit by hand." % version,
             "// One line per entry point: X(name). Included by real_nccl.cc.", ""]
    lines += ["X(%s)" % name for _, name, _ in protos + untwinned]
    (out / "real_nccl.def").write_text("\n".join(lines) + "\n")


def write_type_checks(fallbacks, version, out):
    lines = ["# SPDX-License-Identifier: BSD-3-Clause",
             "# Generated by plugin/gen_forwarders.py from NCCL %s's nccl.h; do not edit by hand." % version,
             "# The types real_nccl.h declares itself where the build's nccl.h lacks them.",
             "set(RCN_NCCL_NEWER_TYPES %s)" % " ".join(name for name, _ in fallbacks), ""]
    (out / "nccl_types.cmake").write_text("\n".join(lines))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    newest, floor, out = Path(sys.argv[1]).read_text(), Path(sys.argv[2]).read_text(), Path(sys.argv[3])
    protos = parse(newest) + parse(DEVICE_API)
    untwinned = parse(UNTWINNED)
    names = [n for _, n, _ in protos]
    assert len(names) == len(set(names)), "duplicate prototypes"
    missing = [n for n in INTERCEPTED if n not in names]
    assert not missing, "nccl.h lacks intercepted entry points: %s" % missing
    fallbacks = newer_types(protos, newest, floor)
    version = version_of(newest)
    write_header(protos, untwinned, fallbacks, version, out)
    write_forwarders(protos, untwinned, version, out)
    write_resolver_table(protos, untwinned, version, out)
    write_type_checks(fallbacks, version, out)
    print("%d entry points (+%d twins) of NCCL %s written to %s" % (len(protos) + len(untwinned), len(protos),
                                                                 version, out))


if __name__ == "__main__":
    main()
